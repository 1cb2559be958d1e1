"""Configs parsed once per process and shared: the partitions of a topic in one process (a partition host holds
thousands) get one frozen `LogConfig` for the same properties instead of one each (~2.4 KiB and a parse a
partition), and its partitions one `CleanerConfig`.

The properties are the key (their items, as a frozenset); properties that cannot be a key (a value that is not
hashable) are parsed each time, so a bad config gets the same error as `from_properties` gives it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, TypeVar

from storage.config.cleaner_config import CleanerConfig
from storage.config.log_config import LogConfig

# Distinct properties kept parsed: a process sees one per topic config it serves.
CONFIGS_KEPT = 256

ConfigT = TypeVar("ConfigT", LogConfig, CleanerConfig)
_KINDS: dict[str, type[LogConfig] | type[CleanerConfig]] = {kind.__name__: kind for kind in (LogConfig, CleanerConfig)}


def shared_log_config(properties: Mapping[str, Any]) -> LogConfig:
    """`LogConfig.from_properties(properties)`, the same object for equal properties."""
    return _shared(LogConfig, properties)


def shared_cleaner_config(properties: Mapping[str, Any]) -> CleanerConfig:
    """`CleanerConfig.from_properties(properties)`, the same object for equal properties."""
    return _shared(CleanerConfig, properties)


def _shared(kind: type[ConfigT], properties: Mapping[str, Any]) -> ConfigT:
    try:
        key = frozenset(properties.items())
    except TypeError:
        return kind.from_properties(properties)
    parsed: ConfigT = _parsed(kind.__name__, key)
    return parsed


@functools.lru_cache(maxsize=CONFIGS_KEPT)
def _parsed(kind: str, properties: frozenset[tuple[str, Any]]) -> Any:
    return _KINDS[kind].from_properties(dict(properties))
