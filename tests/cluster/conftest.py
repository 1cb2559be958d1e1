"""The shared fixtures of `tests/cluster/`: one RayDP Spark session for every Spark test, a broker per module that
uses one, and Apache Kafka for the differential and real-application tests (`kafka`: 3.9 in KRaft mode,
`benchmarks.kafka_broker.KafkaBroker`, started once per session; the first run fetches it from Maven Central into the
download cache; a machine where it cannot be fetched or started fails under `.ci/run` and skips elsewhere).

Starting Spark on Ray costs ~10 s and its first Python job ~6 s more (measured), so the session is
started once (with its warm-up job) and reused by every test of this package (`tests/cluster/`). It is stopped when the
package's last test is done (package scope): modules that own Ray (`OWNS_RAY`, run last by `tests/conftest.py`) shut the
session's Ray down, and Spark's JVMs must be stopped before their Ray goes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.kafka_broker import KafkaBroker, KafkaUnavailable
from tests.conftest import skip_or_fail


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """Apache Kafka's one node (see the module docstring); its log (`nodes[0].log_path`) explains its failures."""
    broker = KafkaBroker()
    try:
        broker.start()
    except KafkaUnavailable as exc:
        skip_or_fail(f"Apache Kafka is not available here: {exc}")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka(kafka_broker: KafkaBroker) -> str:
    """Apache Kafka's bootstrap address."""
    return kafka_broker.bootstrap_servers


@pytest.fixture(scope="package")
def spark(ray_session: None) -> Iterator[Any]:
    """The RayDP Spark session (1 executor x 2 cores, settings of `cluster.spark.session`), with Spark's Kafka
    connector and Iceberg's Spark runtime (resolved from the download cache, `cluster.downloads`, once downloaded).
    The first test of the package that uses it shows the session's start (~25 s here) as its setup time."""
    from cluster.spark.session import get_spark, stop_spark

    session = get_spark(kafka_connector=True, iceberg=True)
    try:
        yield session
    finally:
        stop_spark()


@pytest.fixture(scope="module")
def spark_broker(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> Any:
    """A broker for the Spark tests of one module (each test makes its own topics).

    One per module, not per package: the protocol and CLI tests of this package start brokers of their own
    (`start_test_broker` stops the running one first), so a broker kept for the whole package would be gone by
    the time the later modules ran. A broker starts in a few seconds; Spark, which takes far longer, stays up."""
    broker, _ = start_test_broker(log_dirs_count=1)
    return broker


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """pyspark 3.5's `toPandas` calls pandas APIs that pandas 2.x deprecated; the warning is pyspark's, not ours."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.filterwarnings("ignore:is_datetime64tz_dtype is deprecated:DeprecationWarning"))
