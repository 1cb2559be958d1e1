"""Broker-level log cleaner settings, under Kafka's names and with Kafka's defaults (Kafka's `CleanerConfig`).

| Kafka name                           | field                                 | type    | default         |
|--------------------------------------|---------------------------------------|---------|-----------------|
| log.cleaner.enable                   | log_cleaner_enable                    | boolean | true            |
| log.cleaner.threads                  | log_cleaner_threads                   | int     | 1               |
| log.cleaner.dedupe.buffer.size       | log_cleaner_dedupe_buffer_size        | long    | 134217728       |
| log.cleaner.io.buffer.load.factor    | log_cleaner_io_buffer_load_factor     | double  | 0.9             |
| log.cleaner.io.buffer.size           | log_cleaner_io_buffer_size            | int     | 524288          |
| log.cleaner.io.max.bytes.per.second  | log_cleaner_io_max_bytes_per_second   | double  | 1.79...e308     |
| log.cleaner.backoff.ms               | log_cleaner_backoff_ms                | long    | 15000           |

`CleanerConfig(**fields)` validates on creation; `CleanerConfig.from_properties({"log.cleaner.threads": "2"})`
accepts Kafka's dotted names with string or native values, parsed and checked by their Java type
(`storage.config.config_values`). The topic-level defaults that share the
`log.cleaner.` prefix (`log.cleaner.min.cleanable.ratio`, `log.cleaner.delete.retention.ms`,
`log.cleaner.min.compaction.lag.ms`, `log.cleaner.max.compaction.lag.ms`) belong to `LogConfig`, not here.
Unknown keys, values of the wrong type and values out of range raise `InvalidConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage.config.config_values import (
    DOUBLE_MAX,
    check_fields,
    config_field,
    config_from_properties,
    render_properties,
)
from storage.errors import InvalidConfigError

# Kafka caps one thread's dedupe buffer at Int.MaxValue bytes (a Java ByteBuffer's limit).
MAX_DEDUPE_BYTES_PER_THREAD = 2**31 - 1
# KafkaConfig refuses less than 1 MiB of dedupe buffer per cleaner thread.
MIN_DEDUPE_BYTES_PER_THREAD = 1024 * 1024


@dataclass(frozen=True)
class CleanerKeys:
    """The log cleaner's broker keys, each declared here only: `CleanerConfig` checks them on their own,
    `BrokerConfig` holds them among a broker's keys and derives its `cleaner_config` from them."""

    log_cleaner_enable: bool = config_field(True, "boolean")
    log_cleaner_threads: int = config_field(1, "int", low=0)
    log_cleaner_dedupe_buffer_size: int = config_field(134217728, "long", low=0)
    log_cleaner_io_buffer_load_factor: float = config_field(0.9, "double")
    log_cleaner_io_buffer_size: int = config_field(524288, "int", low=0)
    log_cleaner_io_max_bytes_per_second: float = config_field(DOUBLE_MAX, "double")
    log_cleaner_backoff_ms: int = config_field(15000, "long", low=0)


@dataclass(frozen=True)
class CleanerConfig(CleanerKeys):
    """The log cleaner's broker settings (see the module docstring for names and defaults)."""

    def __post_init__(self) -> None:
        check_fields(self)
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
        return config_from_properties(cls, properties, base, "log cleaner config")

    def to_properties(self) -> dict[str, str]:
        """Every setting under its Kafka name, as the string Kafka would print."""
        return render_properties(self)


__all__ = ["CleanerConfig", "CleanerKeys"]
