"""Fixtures shared by every test package: where the golden files live."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

TESTS_DIR = Path(__file__).resolve().parent
# Log dirs a real Kafka broker wrote, committed with the tests (provenance and licences in its PROVENANCE.md).
KAFKA_SAMPLES_DIR = TESTS_DIR / "fixtures" / "kafka"


# `.ci/run` sets it to 1: there a test must not pass by skipping what the machine lacks.
CI_VARIABLE = "RAYBROKER_CI"


def skip_or_fail(reason: str) -> NoReturn:
    """Skips a test whose outside part is missing here (Apache Kafka not fetchable, a port taken, a head running);
    under `.ci/run` it fails instead, so CI cannot pass by skipping a missing step."""
    if os.environ.get(CI_VARIABLE) == "1":
        pytest.fail(f"{reason} (under .ci/run, where nothing may be skipped for lack of it)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def kafka_samples_dir() -> Path:
    """Log dirs written by a real Kafka broker (`tests/fixtures/kafka/`, see its PROVENANCE.md)."""
    return KAFKA_SAMPLES_DIR


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """Golden files committed with the tests (`tests/fixtures/`)."""
    return TESTS_DIR / "fixtures"


# --- Ray: one local cluster per test session (starting Ray on 2 cores takes seconds) -----------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules that shut the session's Ray down for a cluster of their own (`OWNS_RAY = True`, e.g.
    `tests/actors/test_zz_multinode.py`) run after every other test, wherever their path sorts."""
    last = [item for item in items if getattr(getattr(item, "module", None), "OWNS_RAY", False)]
    if last:
        moved = set(last)
        items[:] = [item for item in items if item not in moved] + last


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A real local Ray, shared by every `ray`/`spark` test; shut down (with any broker) at the end.

    `RAY_LOG_TO_DRIVER=0` in the environment before `ray.init` (with log forwarding on, Spark's Python workers
    feed their own output back in a loop that grew a worker log to 213 MB in a minute here), 4 logical CPUs so
    the Spark executor's 2 cores still leave room for tasks, no dashboard.
    """
    os.environ["RAY_LOG_TO_DRIVER"] = "0"
    import ray

    ray.init(
        # Never join a cluster another process left in /tmp/ray/ray_current_cluster (`ray start`, Cluster).
        address="local",
        num_cpus=4,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        namespace="raybroker",
    )
    try:
        yield
    finally:
        _stop_running_broker()
        ray.shutdown()


def _stop_running_broker() -> None:
    """Stops the broker if one runs; a no-op when Ray is already down (`test_zz_multinode` shuts it down)."""
    import ray

    from actors.clients.broker import stop_broker
    from storage.errors import BrokerNotAvailableError

    if not ray.is_initialized():
        return
    with contextlib.suppress(BrokerNotAvailableError):
        stop_broker()


# Intervals short enough that scheduled work (retention, checkpoints, cleaning) happens within a test.
FAST_BROKER_PROPERTIES = {
    "log.initial.task.delay.ms": "200",
    "log.retention.check.interval.ms": "500",
    "log.flush.offset.checkpoint.interval.ms": "500",
    "log.flush.start.offset.checkpoint.interval.ms": "500",
    "replica.high.watermark.checkpoint.interval.ms": "500",
    "log.cleaner.backoff.ms": "500",
    "log.segment.delete.delay.ms": "500",
    "offsets.topic.num.partitions": "2",
    "log.index.size.max.bytes": "65536",
}


@pytest.fixture(scope="session")
def start_test_broker(
    ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., tuple[Any, list[Path]]]:
    """Starts a broker (stopping any running one) over fresh log dirs; returns (Broker, log dirs).

    Keyword arguments are broker properties with underscores for dots, e.g. `log_dirs_count=2`,
    `log_retention_check_interval_ms="200"`.
    """
    from actors.clients.broker import Broker, start_broker

    def start(log_dirs_count: int = 2, log_dirs: list[Path] | None = None, **overrides: str) -> tuple[Any, list[Path]]:
        _stop_running_broker()
        if log_dirs is None:
            root = tmp_path_factory.mktemp("broker")
            log_dirs = [root / f"dir{index}" for index in range(log_dirs_count)]
        properties = {**FAST_BROKER_PROPERTIES, "log.dirs": ",".join(str(d) for d in log_dirs)}
        properties.update({key.replace("_", "."): str(value) for key, value in overrides.items()})
        start_broker(properties)
        return Broker.connect(), log_dirs

    return start
