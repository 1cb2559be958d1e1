"""A broker over Ray with the cluster's Iceberg translation driver: what the Iceberg tests on Ray start."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster.iceberg.translation_driver_actor import start_iceberg_driver
from storage.config.broker_config import BrokerConfig


def start_broker_with_driver(
    start_test_broker: Callable[..., tuple[Any, list[Path]]], poll_interval_s: float
) -> BrokerConfig:
    """A new broker over one log dir (its embedded catalog beside it) and the driver passing every
    `poll_interval_s`; the broker's config."""
    _, log_dirs = start_test_broker(log_dirs_count=1)
    config = BrokerConfig.from_properties({"log.dirs": str(log_dirs[0])})
    start_iceberg_driver(config, poll_interval_s=poll_interval_s)
    return config
