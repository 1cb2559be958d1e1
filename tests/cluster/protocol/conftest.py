"""Fixtures of the protocol tests: the listener's seams over an in-process broker in a temporary folder, and Apache
Kafka 4.2's two brokers (`kafka4`) for the Kafka 4 tests of this package, and Kafka 4.4's (`kafka44`) for the share
group features newer than 4.2 (Apache Kafka 3.9 for the differential tests, `kafka`, is
`tests/cluster/conftest.py`'s)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.in_process_broker import InProcessBroker
from actors.metrics.recorder import BrokerMetrics
from benchmarks.kafka_broker import KAFKA_4_4_VERSION, KAFKA_4_VERSION, KafkaQuorum, KafkaUnavailable
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.listener import KafkaListener
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from storage.clock import SYSTEM_CLOCK
from tests.cluster.applications.java_programs import java_classpath
from tests.cluster.protocol.helpers import (
    GROUP_TRANSPORTS,
    GroupChannelTransport,
    run,
    start_broker,
    start_local_listener,
)
from tests.conftest import skip_or_fail

# The consumer group protocol's heartbeat of the Kafka 4 tests, on both brokers: 1 s (Kafka's default is 5 s, its
# lowest 5 s unless the minimum is lowered too), so a consumer-protocol rebalance takes a few seconds.
CONSUMER_HEARTBEAT = {
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "1000",
}

# Share groups (KIP-932) on both brokers: a 1 s heartbeat (Kafka's default and lowest is 5 s), a 5 s record lock
# (30 s by default, 15 s at least unless the minimum is lowered too), and Kafka's `__share_group_state` on the two
# brokers (its defaults want 3 replicas, 2 in sync, 50 partitions).
# The Java client the share group tests' members run on.
SHARE_CONSUMER_CLIENTS = ("org.apache.kafka", "kafka-clients", "4.2.2")
# The slf4j binding of Kafka 4.2's slf4j-api (1.7): the Java programs' client logs.
SLF4J_SIMPLE = ("org.slf4j", "slf4j-simple", "1.7.36")
SHARE_GROUP_SETTINGS = {
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.record.lock.duration.ms": "5000",
    "group.share.min.record.lock.duration.ms": "1000",
    "share.coordinator.state.topic.replication.factor": "2",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "1",
}


@pytest.fixture(scope="package")
def kafka4() -> Iterator[str]:
    """Two Apache Kafka 4.2 brokers (node ids 1 and 2), started once for the package's Kafka 4 tests (~10 s)."""
    yield from _two_brokers(KAFKA_4_VERSION)


@pytest.fixture(scope="package")
def kafka44() -> Iterator[str]:
    """Two Apache Kafka 4.4 brokers with `kafka4`'s settings, started once for the tests of share group features newer
    than Kafka 4.2 (~10 s)."""
    yield from _two_brokers(KAFKA_4_4_VERSION)


def _two_brokers(version: str) -> Iterator[str]:
    # The internal topics on both brokers: Kafka refuses to create them with more replicas than brokers (default 3).
    settings = {
        "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "2",
        "transaction.state.log.replication.factor": "2",
        **CONSUMER_HEARTBEAT,
        **SHARE_GROUP_SETTINGS,
    }
    quorum = KafkaQuorum(2, settings, version)
    try:
        quorum.start()
    except KafkaUnavailable as exc:
        skip_or_fail(f"Apache Kafka {version} is not available here: {exc}")
    try:
        yield quorum.bootstrap_servers
    finally:
        quorum.stop()


@pytest.fixture(scope="package")
def share_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Kafka 4.2's Java client with `java/ShareGroupMember.java` compiled beside it (a `KafkaShareConsumer` member),
    and slf4j's simple logger set to WARN: what the client warns of (a broker's errors, a lost connection) goes to
    the member's log, which a failing test shows."""
    source = Path(__file__).parent / "java" / "ShareGroupMember.java"
    folder = tmp_path_factory.mktemp("java")
    classpath = java_classpath([SHARE_CONSUMER_CLIENTS, SLF4J_SIMPLE], {source.name: source.read_text()}, folder)
    (folder / "simplelogger.properties").write_text(
        "org.slf4j.simpleLogger.defaultLogLevel=warn\norg.slf4j.simpleLogger.showDateTime=true\n"
    )
    return classpath


def start_share_broker(root: Path) -> InProcessBroker:
    """An in-process broker under `root` on the wall clock with `kafka4`'s group settings (the `group.share.*` keys
    of `SHARE_GROUP_SETTINGS`, and `CONSUMER_HEARTBEAT`)."""
    share_settings = {
        key.replace(".", "_"): value
        for key, value in {**SHARE_GROUP_SETTINGS, **CONSUMER_HEARTBEAT}.items()
        if key.startswith("group.")
    }
    return start_broker(root, clock=SYSTEM_CLOCK, **share_settings)


@pytest.fixture
def share_listener(tmp_path: Path) -> Iterator[str]:
    """A raybroker listener over `start_share_broker`'s broker; its bootstrap servers."""
    broker = start_share_broker(tmp_path / "share-broker")
    try:
        with start_local_listener(broker) as listener:
            yield listener.bootstrap_servers
    finally:
        broker.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path / "broker")
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def view(broker: InProcessBroker) -> InProcessBrokerView:
    return InProcessBrokerView(broker)


@pytest.fixture
def re_elected(tmp_path: Path) -> Iterator[InProcessBrokerView]:
    """A broker on two nodes whose topic `led` has two partitions replicated on both, after the node leading
    partition 0 was lost: partition 0 is led by the other node in leader epoch 1 (the epoch Metadata reports), and
    partition 1, led there from the start, is still in epoch 0. The view is the surviving node's listener's."""
    running = start_broker(tmp_path / "re-elected", nodes=2)
    try:
        run(InProcessBrokerView(running).create_topic("led", 2, replication_factor=2))
        lost = running.controller.partition_state("led", 0).leader
        running.lose_node(lost)
        states = [running.controller.partition_state("led", partition) for partition in range(2)]
        assert [state.leader_epoch for state in states] == [1, 0]
        assert states[0].leader == states[1].leader != lost
        yield InProcessBrokerView(running, states[0].leader)
    finally:
        running.close()


@pytest.fixture
def groups(broker: InProcessBroker) -> GroupView:
    return GroupView.in_process(broker)


@pytest.fixture(params=GROUP_TRANSPORTS)
def groups_each_way(request: pytest.FixtureRequest, broker: InProcessBroker) -> Iterator[GroupView]:
    """The in-process broker's group coordinator, directly and through its group channel (the group modules' tests
    run both ways)."""
    if request.param == "in_process":
        yield GroupView.in_process(broker)
        return
    transport = GroupChannelTransport(broker)
    try:
        yield GroupView(transport)
    finally:
        transport.close()


@pytest.fixture
def security(broker: InProcessBroker) -> SecurityView:
    return SecurityView.in_process(broker.controller)


@pytest.fixture
def features(security: SecurityView) -> FeatureCache:
    """A listener's copy of the in-process controller's features (a new cluster's: `transaction.version` 2,
    `group.version` 1, `share.version` 1)."""
    cache = FeatureCache(security)
    run(cache.refresh())
    return cache


@contextlib.contextmanager
def serve_on_wall_clock(folder: Path, metrics: BrokerMetrics | None = None) -> Iterator[str]:
    """A raybroker listener over an in-process broker in `folder` on the wall clock (consumer-protocol members'
    sessions run on it), with `kafka4`'s consumer heartbeat interval, recording into `metrics` if given; its
    bootstrap servers."""
    settings = {key.replace(".", "_"): value for key, value in CONSUMER_HEARTBEAT.items()}
    broker = start_broker(folder, clock=SYSTEM_CLOCK, **settings)
    try:
        with KafkaListener(
            {"listeners": "PLAINTEXT://127.0.0.1:0", **CONSUMER_HEARTBEAT},
            InProcessBrokerView(broker),
            SecurityView.in_process(broker.controller),
            groups=GroupView.in_process(broker),
            transactions=TransactionView.in_process(broker),
            metrics=metrics,
        ) as listener:
            yield listener.bootstrap_servers
    finally:
        broker.close()


@pytest.fixture
def wall_clock_listener(tmp_path: Path) -> Iterator[str]:
    """`serve_on_wall_clock`'s listener; its bootstrap servers."""
    with serve_on_wall_clock(tmp_path / "wall-clock") as bootstrap:
        yield bootstrap
