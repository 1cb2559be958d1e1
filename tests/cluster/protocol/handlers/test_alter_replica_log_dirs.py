"""AlterReplicaLogDirs without sockets, on an in-process broker whose node has two log dirs: a replica moved into the
other dir (records kept, DescribeLogDirs and the controller's record of its dir following), the future replica
DescribeLogDirs reports while the copy is under way, Kafka's error answers (a dir not configured, a partition not
held, an offline dir, the dir it is in already), only a principal with ALTER on the cluster answered, and a dir asked
for a partition the broker does not hold yet used when a reassignment creates its replica there (what
`kafka-reassign-partitions.sh` relies on when its JSON names log dirs for new replicas). The oracle
is Kafka's `ReplicaManager.alterReplicaLogDirs` and `describeLogDirs` rules, and the records written."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.handlers.alter_replica_log_dirs import ALTER_REPLICA_LOG_DIRS_KEY, AlterReplicaLogDirsHandler
from cluster.protocol.handlers.describe_log_dirs import DESCRIBE_LOG_DIRS_KEY, DescribeLogDirsHandler
from cluster.protocol.router import SERVED
from cluster.protocol.views.broker_view import BrokerEndpoint
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from storage.logdir.partition_handles import LocalPartition
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.handlers.test_authorization import access_with, ask, on_cluster
from tests.cluster.protocol.helpers import answer_async, run, start_broker

VERSIONS = range(SERVED[ALTER_REPLICA_LOG_DIRS_KEY].min_version, SERVED[ALTER_REPLICA_LOG_DIRS_KEY].max_version + 1)
MOVE_TIMEOUT_S = 30


@pytest.fixture
def two_dirs(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path / "broker", log_dirs_per_node=2)
    try:
        yield running
    finally:
        running.close()


def written(broker: InProcessBroker, view: InProcessBrokerView, count: int) -> list[bytes]:
    """Topic `t` with one partition holding `count` records, one batch each; their values."""
    run(view.create_topic("t", 1))
    values = [b"value-%d" % index + b"x" * 200 for index in range(count)]
    for value in values:
        builder = RecordBatchBuilder()
        builder.append(b"k", value, timestamp=1_700_000_000_000)
        broker.leader("t", 0).append(builder.build(), 1)
    return values


def alter(view: InProcessBrokerView, version: int, dirs: dict[str, dict[str, list[int]]]) -> dict[tuple[str, int], int]:
    values = {
        "dirs": [
            {"path": path, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
            for path, topics in dirs.items()
        ]
    }
    answer = run(answer_async(AlterReplicaLogDirsHandler(view), ALTER_REPLICA_LOG_DIRS_KEY, version, values))
    return {(topic.topic_name, p.partition_index): p.error_code for topic in answer.results for p in topic.partitions}


def described(view: InProcessBrokerView) -> dict[str, list[tuple[str, int, int, int, bool]]]:
    """Each dir's replicas: (topic, partition, size, offset lag, is future)."""
    answer = run(answer_async(DescribeLogDirsHandler(view), DESCRIBE_LOG_DIRS_KEY, 4, {"topics": None}))
    return {
        result.log_dir: sorted(
            (topic.name, p.partition_index, p.partition_size, p.offset_lag, p.is_future_key)
            for topic in result.topics
            for p in topic.partitions
            if topic.name == "t"
        )
        for result in answer.results
    }


def values_of(broker: InProcessBroker) -> list[bytes | None]:
    log = broker.nodes["node-0"].manager.get_log("t", 0)
    assert log is not None
    return [record.value for record in log.records()]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_replica_moves_into_the_other_dir(two_dirs: InProcessBroker, version: int) -> None:
    view = InProcessBrokerView(two_dirs)
    values = written(two_dirs, view, 50)
    manager = two_dirs.nodes["node-0"].manager
    source = manager.log_dir_of("t", 0)
    target = next(d for d in manager.log_dirs if d != source)
    size = described(view)[str(source)][0][2]
    assert alter(view, version, {str(target): {"t": [0]}}) == {("t", 0): ErrorCode.none}
    assert manager.wait_for_moves(MOVE_TIMEOUT_S)
    assert manager.log_dir_of("t", 0) == target
    assert described(view) == {str(source): [], str(target): [("t", 0, size, 0, False)]}
    assert values_of(two_dirs) == values
    moved = next(p for p in manager.placements() if p.topic == "t")
    assert two_dirs.controller.partition_state("t", 0).directories == (moved.directory_id,)


def test_describe_shows_the_future_replica_while_it_is_copied(two_dirs: InProcessBroker) -> None:
    view = InProcessBrokerView(two_dirs)
    written(two_dirs, view, 60)
    manager = two_dirs.nodes["node-0"].manager
    source = manager.log_dir_of("t", 0)
    assert source is not None
    target = next(d for d in manager.log_dirs if d != source)
    handle = manager.partition("t", 0)
    assert isinstance(handle, LocalPartition)
    handle.move.start(handle.log, str(target))
    assert handle.move.future is not None
    handle.move.future.copy(max_bytes=4000)
    dirs = described(view)
    ((_, _, current_size, current_lag, current_future),) = dirs[str(source)]
    ((_, _, future_size, future_lag, is_future),) = dirs[str(target)]
    assert (current_lag, current_future, is_future) == (0, False, True)
    assert 0 < future_size < current_size and 0 < future_lag <= 60
    handle.move.abort()


def test_errors_are_kafkas(two_dirs: InProcessBroker, tmp_path: Path) -> None:
    view = InProcessBrokerView(two_dirs)
    written(two_dirs, view, 3)
    manager = two_dirs.nodes["node-0"].manager
    here = str(manager.log_dir_of("t", 0))
    other = next(str(d) for d in manager.log_dirs if str(d) != here)
    answers = alter(view, 2, {str(tmp_path / "elsewhere"): {"t": [0]}, other: {"t": [5], "absent": [0]}})
    assert answers == {
        ("t", 0): ErrorCode.log_dir_not_found,
        ("t", 5): ErrorCode.unknown_topic_or_partition,
        ("absent", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert alter(view, 2, {here: {"t": [0]}}) == {("t", 0): ErrorCode.none}
    run(view.create_topic("elsewhere", 1))
    manager.delete_log("elsewhere", 0)
    assert alter(view, 2, {other: {"elsewhere": [0]}}) == {("elsewhere", 0): ErrorCode.replica_not_available}
    assert manager.log_dir_of("t", 0) == Path(here)
    manager.log_dir_failed(Path(other), "disk gone")
    assert alter(view, 2, {other: {"t": [0]}}) == {("t", 0): ErrorCode.kafka_storage_error}


def test_only_alter_on_the_cluster_is_answered(two_dirs: InProcessBroker) -> None:
    view = InProcessBrokerView(two_dirs)
    written(two_dirs, view, 3)
    security = SecurityView.in_process(two_dirs.controller)
    manager = two_dirs.nodes["node-0"].manager
    source = manager.log_dir_of("t", 0)
    other = next(str(d) for d in manager.log_dirs if d != source)
    request: dict[str, Any] = {"dirs": [{"path": other, "topics": [{"name": "t", "partitions": [0]}]}]}
    denied = ask(AlterReplicaLogDirsHandler(view, access_with(security)), ALTER_REPLICA_LOG_DIRS_KEY, request)
    ((_, code),) = [(p.partition_index, p.error_code) for topic in denied.results for p in topic.partitions]
    assert code == ErrorCode.cluster_authorization_failed
    assert manager.log_dir_of("t", 0) == source and manager.wait_for_moves(0)
    allowed = ask(
        AlterReplicaLogDirsHandler(view, access_with(security, on_cluster(AclOperation.ALTER))),
        ALTER_REPLICA_LOG_DIRS_KEY,
        request,
    )
    assert [p.error_code for topic in allowed.results for p in topic.partitions] == [ErrorCode.none]
    assert manager.wait_for_moves(MOVE_TIMEOUT_S) and str(manager.log_dir_of("t", 0)) == other


def test_a_dir_asked_before_a_reassignment_is_where_the_new_replica_is_created(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "two", nodes=2, log_dirs_per_node=2)
    try:
        views = {node: InProcessBrokerView(broker, node) for node in ("node-0", "node-1")}
        for index, (node, view) in enumerate(views.items()):
            run(view.announce(BrokerEndpoint(10 + index, node, 9092)))
        run(views["node-0"].create_topic("t", 1, replication_factor=1))
        source = broker.controller.partition_state("t", 0).leader
        (target,) = [node for node in views if node != source]
        manager = broker.nodes[target].manager
        chosen = manager.log_dirs[-1]
        # Placement alone would take the first of two empty dirs, not `chosen`, the last.
        assert set(manager.partition_counts().values()) == {0} and chosen != manager.log_dirs[0]
        answered = alter(views[target], 2, {str(chosen): {"t": [0]}})
        assert answered == {("t", 0): ErrorCode.replica_not_available}
        moved = run(views["node-0"].alter_partition_reassignments({("t", 0): (10 + list(views).index(target),)}))
        assert moved == {("t", 0): None}
        deadline = time.monotonic() + MOVE_TIMEOUT_S
        while broker.controller.partition_state("t", 0).replicas != (target,):
            assert time.monotonic() < deadline, "the new replica did not catch up"
            time.sleep(0.02)
        assert manager.log_dir_of("t", 0) == chosen
        placed = next(p for p in manager.placements() if p.topic == "t")
        assert broker.controller.partition_state("t", 0).directories == (placed.directory_id,)
    finally:
        broker.close()
