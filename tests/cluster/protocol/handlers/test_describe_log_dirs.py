"""DescribeLogDirs without sockets, on an in-process broker: the answering node's log dir with each replica's size
(its segment files' bytes) and offset lag, only the partitions asked for, the file system's bytes from v4, an
offline dir answered KAFKA_STORAGE_ERROR with no replica, and only a principal with DESCRIBE on the cluster
answered. The oracle is the segment files on disk and Kafka's `ReplicaManager.describeLogDirs` rules."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.handlers.describe_log_dirs import DESCRIBE_LOG_DIRS_KEY, DescribeLogDirsHandler
from cluster.protocol.router import SERVED
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.handlers.test_authorization import access_with, ask, on_cluster
from tests.cluster.protocol.helpers import answer_async, run

VERSIONS = range(SERVED[DESCRIBE_LOG_DIRS_KEY].min_version, SERVED[DESCRIBE_LOG_DIRS_KEY].max_version + 1)


def written(broker: InProcessBroker, view: InProcessBrokerView, counts: dict[int, int]) -> None:
    """Topic `t` with `counts[p]` records in partition p, one batch each."""
    run(view.create_topic("t", len(counts)))
    for partition, count in counts.items():
        for index in range(count):
            builder = RecordBatchBuilder()
            builder.append(b"k", f"value-{index}".encode(), timestamp=1_700_000_000_000)
            broker.leader("t", partition).append(builder.build(), 1)


def describe(view: InProcessBrokerView, version: int, topics: dict[str, list[int]] | None) -> Any:
    values = {"topics": None if topics is None else [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
    return run(answer_async(DescribeLogDirsHandler(view), DESCRIBE_LOG_DIRS_KEY, version, values))


def segment_bytes(log_dir: str, topic: str, partition: int) -> int:
    return sum(path.stat().st_size for path in (Path(log_dir) / f"{topic}-{partition}").glob("*.log"))


@pytest.mark.parametrize("version", VERSIONS)
def test_the_replicas_asked_for_with_their_segment_bytes(broker: InProcessBroker, version: int) -> None:
    view = InProcessBrokerView(broker)
    written(broker, view, {0: 3, 1: 5, 2: 0})
    answer = describe(view, version, {"t": [0, 1, 7], "never-made": [0]})
    (result,) = answer.results
    assert result.error_code == ErrorCode.none
    assert Path(result.log_dir) == broker.nodes["node-0"].manager.log_dirs[0]
    (topic,) = result.topics
    assert topic.name == "t"
    found = {p.partition_index: (p.partition_size, p.offset_lag, p.is_future_key) for p in topic.partitions}
    assert found == {p: (segment_bytes(result.log_dir, "t", p), 0, False) for p in (0, 1)}
    assert found[1][0] > found[0][0] > 0
    if version >= 4:
        usage = shutil.disk_usage(result.log_dir)
        assert result.total_bytes == usage.total and 0 < result.usable_bytes <= usage.total
    if version >= 3:
        assert answer.error_code == ErrorCode.none


def test_a_null_topic_list_describes_every_replica(broker: InProcessBroker) -> None:
    view = InProcessBrokerView(broker)
    written(broker, view, {0: 1, 1: 1})
    (result,) = describe(view, 4, None).results
    described = {(topic.name, p.partition_index) for topic in result.topics for p in topic.partitions}
    assert {("t", 0), ("t", 1)} <= described
    assert {name for name, _ in described} == {"t", *(name for name, _ in described if name.startswith("__"))}


def test_an_offline_dir_answers_kafka_storage_error_and_no_replica(broker: InProcessBroker) -> None:
    view = InProcessBrokerView(broker)
    written(broker, view, {0: 2})
    manager = broker.nodes["node-0"].manager
    assert manager.log_dir_failed(manager.log_dirs[0], "disk gone")
    (result,) = describe(view, 4, None).results
    assert result.error_code == ErrorCode.kafka_storage_error
    assert result.topics == () and result.total_bytes == -1 and result.usable_bytes == -1


def test_only_describe_on_the_cluster_is_answered(broker: InProcessBroker, security: SecurityView) -> None:
    view = InProcessBrokerView(broker)
    written(broker, view, {0: 1})
    request = {"topics": None}
    denied = ask(DescribeLogDirsHandler(view, access_with(security)), DESCRIBE_LOG_DIRS_KEY, request)
    assert denied.error_code == ErrorCode.cluster_authorization_failed and denied.results == ()
    allowed = ask(
        DescribeLogDirsHandler(view, access_with(security, on_cluster(AclOperation.DESCRIBE))),
        DESCRIBE_LOG_DIRS_KEY,
        request,
    )
    assert allowed.error_code == ErrorCode.none and len(allowed.results) == 1
