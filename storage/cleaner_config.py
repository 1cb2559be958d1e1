"""Broker-level log cleaner settings, under Kafka's names and with Kafka's defaults (Kafka's `CleanerConfig`).

| Kafka name                           | field                                 | default         |
|--------------------------------------|---------------------------------------|-----------------|
| log.cleaner.enable                   | log_cleaner_enable                    | true            |
| log.cleaner.threads                  | log_cleaner_threads                   | 1               |
| log.cleaner.dedupe.buffer.size       | log_cleaner_dedupe_buffer_size        | 134217728       |
| log.cleaner.io.buffer.load.factor    | log_cleaner_io_buffer_load_factor     | 0.9             |
| log.cleaner.io.buffer.size           | log_cleaner_io_buffer_size            | 524288          |
| log.cleaner.io.max.bytes.per.second  | log_cleaner_io_max_bytes_per_second   | 1.79...e308     |
| log.cleaner.backoff.ms               | log_cleaner_backoff_ms                | 15000           |

`CleanerConfig(**fields)` validates on creation; `CleanerConfig.from_properties({"log.cleaner.threads": "2"})`
accepts Kafka's dotted names with string or native values. The topic-level defaults that share the
`log.cleaner.` prefix (`log.cleaner.min.cleanable.ratio`, `log.cleaner.delete.retention.ms`,
`log.cleaner.min.compaction.lag.ms`, `log.cleaner.max.compaction.lag.ms`) belong to `LogConfig`, not here.
Unknown keys, values of the wrong type and values out of range raise `InvalidConfigError`.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from storage.errors import InvalidConfigError

# Java's Double.MAX_VALUE: Kafka's "no throttle" default for log.cleaner.io.max.bytes.per.second.
DOUBLE_MAX = sys.float_info.max
# Kafka caps one thread's dedupe buffer at Int.MaxValue bytes (a Java ByteBuffer's limit).
MAX_DEDUPE_BYTES_PER_THREAD = 2**31 - 1
# KafkaConfig refuses less than 1 MiB of dedupe buffer per cleaner thread.
MIN_DEDUPE_BYTES_PER_THREAD = 1024 * 1024


@dataclass(frozen=True)
class CleanerConfig:
    """The log cleaner's broker settings (see the module docstring for names and defaults)."""

    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_dedupe_buffer_size: int = 134217728
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_io_buffer_size: int = 524288
    log_cleaner_io_max_bytes_per_second: float = DOUBLE_MAX
    log_cleaner_backoff_ms: int = 15000

    def __post_init__(self) -> None:
        for spec in fields(self):
            _check_type(kafka_name(spec.name), getattr(self, spec.name), str(spec.type))
        _at_least("log.cleaner.threads", self.log_cleaner_threads, 0)
        _at_least("log.cleaner.dedupe.buffer.size", self.log_cleaner_dedupe_buffer_size, 0)
        _at_least("log.cleaner.io.buffer.size", self.log_cleaner_io_buffer_size, 0)
        _at_least("log.cleaner.backoff.ms", self.log_cleaner_backoff_ms, 0)
        if not 0 < self.log_cleaner_io_buffer_load_factor <= 1:
            raise InvalidConfigError(
                f"invalid value {self.log_cleaner_io_buffer_load_factor!r} for log.cleaner.io.buffer.load.factor: "
                "must be in (0, 1]"
            )
        if not self.log_cleaner_io_max_bytes_per_second > 0:
            raise InvalidConfigError(
                f"invalid value {self.log_cleaner_io_max_bytes_per_second!r} for "
                "log.cleaner.io.max.bytes.per.second: must be > 0"
            )
        threads = self.log_cleaner_threads
        if threads > 0 and self.log_cleaner_dedupe_buffer_size // threads <= MIN_DEDUPE_BYTES_PER_THREAD:
            raise InvalidConfigError("log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread")

    @property
    def enabled(self) -> bool:
        """Whether any cleaning happens: `log.cleaner.enable` and at least one thread."""
        return self.log_cleaner_enable and self.log_cleaner_threads > 0

    @property
    def dedupe_buffer_bytes_per_thread(self) -> int:
        """One cleaner's offset-map memory: the total split across threads, capped at 2 GiB - 1 (Kafka's rule)."""
        return min(self.log_cleaner_dedupe_buffer_size // max(self.log_cleaner_threads, 1), MAX_DEDUPE_BYTES_PER_THREAD)

    @property
    def io_buffer_bytes_per_thread(self) -> int:
        """One cleaner's read (and write) buffer: the total / threads / 2, as Kafka splits it."""
        return self.log_cleaner_io_buffer_size // max(self.log_cleaner_threads, 1) // 2

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], base: CleanerConfig | None = None) -> CleanerConfig:
        """Builds a config from Kafka's dotted names (string values are parsed), over `base` or the defaults."""
        known = {spec.name: spec for spec in fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in properties.items():
            name = str(key).strip().replace(".", "_")
            spec = known.get(name)
            if spec is None:
                raise InvalidConfigError(f"unknown log cleaner config {key!r}")
            values[name] = _parse(str(key), raw, str(spec.type))
        return dataclasses.replace(base or cls(), **values)

    def to_properties(self) -> dict[str, str]:
        """Every setting under its Kafka name, as the string Kafka would print."""
        return {kafka_name(spec.name): _render(getattr(self, spec.name)) for spec in fields(self)}


def kafka_name(field_name: str) -> str:
    """`log_cleaner_threads` -> `log.cleaner.threads`."""
    return field_name.replace("_", ".")


def _at_least(name: str, value: float, low: float) -> None:
    if value < low:
        raise InvalidConfigError(f"invalid value {value!r} for {name}: must be at least {low}")


def _check_type(name: str, value: Any, type_name: str) -> None:
    expected = {"int": int, "float": (int, float), "bool": bool}[type_name]
    if (isinstance(value, bool) and type_name != "bool") or not isinstance(value, expected):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected {type_name}")


def _parse(key: str, raw: Any, type_name: str) -> Any:
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    if type_name == "bool":
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(f"invalid value {raw!r} for {key}: expected true or false")
        return text.lower() == "true"
    try:
        return int(text) if type_name == "int" else float(text)
    except ValueError:
        raise InvalidConfigError(f"invalid value {raw!r} for {key}: expected {type_name}") from None


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


__all__ = ["CleanerConfig"]
