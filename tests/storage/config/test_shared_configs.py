"""`storage.config.shared_configs`: equal properties give one shared parsed config, equal to what `from_properties`
gives; other properties another; bad properties the same error as `from_properties`, never a cached answer."""

from __future__ import annotations

import pytest

from storage.config.cleaner_config import CleanerConfig
from storage.config.log_config import LogConfig
from storage.config.shared_configs import shared_cleaner_config, shared_log_config
from storage.errors import InvalidConfigError


def test_equal_topic_properties_share_one_config_equal_to_a_fresh_parse() -> None:
    properties = {"retention.ms": "60000", "cleanup.policy": "compact"}
    first = shared_log_config(properties)
    assert shared_log_config(dict(reversed(list(properties.items())))) is first
    assert first == LogConfig.from_properties(properties)
    other = shared_log_config({**properties, "retention.ms": "120000"})
    assert other is not first and other.retention_ms == 120_000


def test_equal_cleaner_properties_share_one_config_equal_to_a_fresh_parse() -> None:
    properties = {"log.cleaner.threads": "2"}
    assert shared_cleaner_config(properties) is shared_cleaner_config(dict(properties))
    assert shared_cleaner_config(properties) == CleanerConfig.from_properties(properties)


@pytest.mark.parametrize("value", ["not-a-number", ["a", "list"]])
def test_bad_properties_raise_what_a_fresh_parse_raises_every_time(value: object) -> None:
    for _ in range(2):
        with pytest.raises(InvalidConfigError):
            shared_log_config({"retention.ms": value})
