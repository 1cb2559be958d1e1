"""CleanerConfig: Kafka's names and defaults, dotted-name loading, validation."""

from __future__ import annotations

import sys

import pytest

from storage.config.cleaner_config import CleanerConfig
from storage.errors import InvalidConfigError


def test_defaults_are_kafkas() -> None:
    assert CleanerConfig().to_properties() == {
        "log.cleaner.enable": "true",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": "134217728",
        "log.cleaner.io.buffer.load.factor": "0.9",
        "log.cleaner.io.buffer.size": "524288",
        "log.cleaner.io.max.bytes.per.second": str(sys.float_info.max),
        "log.cleaner.backoff.ms": "15000",
    }


def test_from_properties_parses_dotted_names_and_strings() -> None:
    config = CleanerConfig.from_properties(
        {
            "log.cleaner.threads": "2",
            "log.cleaner.dedupe.buffer.size": "8388608",
            "log.cleaner.io.buffer.load.factor": "0.5",
            "log.cleaner.enable": "false",
            "log.cleaner.backoff.ms": 100,
        }
    )
    assert config.log_cleaner_threads == 2
    assert config.log_cleaner_io_buffer_load_factor == 0.5
    assert config.log_cleaner_enable is False
    assert config.log_cleaner_backoff_ms == 100
    assert config.dedupe_buffer_bytes_per_thread == 4194304
    assert config.io_buffer_bytes_per_thread == 524288 // 2 // 2
    assert not config.enabled


def test_dedupe_buffer_per_thread_is_capped_at_two_gib() -> None:
    config = CleanerConfig(log_cleaner_dedupe_buffer_size=8 * 2**30)
    assert config.dedupe_buffer_bytes_per_thread == 2**31 - 1


def test_zero_threads_disable_cleaning() -> None:
    assert not CleanerConfig(log_cleaner_threads=0).enabled


@pytest.mark.parametrize(
    "properties",
    [
        {"log.cleaner.threads": "-1"},
        {"log.cleaner.threads": "two"},
        {"log.cleaner.threads": True},
        {"log.cleaner.dedupe.buffer.size": "1048576"},
        {"log.cleaner.threads": "4", "log.cleaner.dedupe.buffer.size": "4194304"},
        {"log.cleaner.io.buffer.load.factor": "0"},
        {"log.cleaner.io.buffer.load.factor": "1.1"},
        {"log.cleaner.io.max.bytes.per.second": "0"},
        {"log.cleaner.backoff.ms": "-5"},
        {"log.cleaner.enable": "yes"},
        {"log.cleaner.min.cleanable.ratio": "0.5"},
        {"log.cleaner.unknown": "1"},
    ],
)
def test_invalid_settings_are_rejected(properties: dict[str, object]) -> None:
    with pytest.raises(InvalidConfigError):
        CleanerConfig.from_properties(properties)
