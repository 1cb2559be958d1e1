"""`raybroker status`: the screen it prints from a cluster's status (no Ray: states built by hand, checked against
their definitions), and against a real broker the facts and lag it reads (the oracle is what was produced and
committed) and its exit codes. The offline case (exit 1) needs a node to die: it runs in
`tests/actors/test_zz_monitoring.py`; the no-cluster case in `test_broker_commands.py`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import ray

from actors.calls import call, controller
from actors.clients.cluster_status import BrokerStatus, ClusterStatus
from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from actors.metrics.gauges import PartitionLag
from cluster.cli.main import EXIT_OK, main
from cluster.cli.status import MAX_ROWS, status_lines
from tests.cluster.cli.group_support import committed_group

TOPIC = "status-t"
GROUP = "status-group"


def state(topic: str, partition: int, leader: str, replicas: str, isr: str) -> LeaderAndIsr:
    return LeaderAndIsr(topic, partition, leader, 1, tuple(replicas.split(",")), tuple(isr.split(",")))


BROKERS = (
    BrokerStatus("node-a", 0, "10.0.0.1", ("PLAINTEXT://10.0.0.1:9092",), "http://10.0.0.1:8080/metrics"),
    BrokerStatus("node-b", None, "10.0.0.2", (), ""),
)


def test_a_healthy_cluster_is_ok_and_lists_brokers_counts_and_lag() -> None:
    weird = 'we"ird\ngroup'
    status = ClusterStatus(
        "cluster-1",
        "node-a",
        BROKERS,
        (state("t", 0, "node-a", "node-a,node-b", "node-a,node-b"), state("u", 0, "node-b", "node-b", "node-b")),
        (PartitionLag(weird, "t", 0, 3, 10), PartitionLag(weird, "u", 0, 5, 5), PartitionLag("g", "t", 0, 10, 10)),
        None,
        controller_epoch=4,
        metadata_copies=("node-b", "node-a"),
        metadata_in_sync=("node-a",),
    )
    lines = status_lines(status)
    assert lines[:3] == ["Cluster: cluster-1", "Controller: broker 0 (Ray node node-a), epoch 4", "Brokers: 2"]
    assert lines[3].split() == ["BROKER", "RAY-NODE", "ADDRESS", "LISTENERS", "METRICS"]
    assert lines[4].split() == ["0", "node-a", "10.0.0.1", "PLAINTEXT://10.0.0.1:9092", "http://10.0.0.1:8080/metrics"]
    assert lines[5].split() == ["-", "node-b", "10.0.0.2", "-", "-"]
    assert lines[6] == "Metadata log: copies on brokers node-b, 0; in sync: 0"
    assert lines[7] == "Topics: 2, partitions: 2, offline: 0, under-replicated: 0"
    assert lines[8] == "Consumer groups: 2"
    assert [line.split() for line in lines[9:13]] == [
        ["GROUP", "TOPIC", "PARTITIONS", "LAG"],
        ["g", "t", "1", "0"],
        [repr(weird), "t", "1", "7"],
        [repr(weird), "u", "1", "0"],
    ]
    assert lines[-1] == "Status: OK"
    assert all("\n" not in line for line in lines)


def test_offline_and_under_replicated_partitions_are_listed_and_named_by_broker() -> None:
    partitions = [
        state("t", 0, "node-a", "node-a,node-b", "node-a"),  # under-replicated
        state("t", 1, NO_LEADER, "node-b", "node-b"),  # no leader
        state("t", 2, "node-c", "node-c", "node-c"),  # its leader's broker is not running
        state("t", 3, "node-b", "node-b,node-a", "node-b,node-a"),
    ]
    status = ClusterStatus("c", "node-a", BROKERS, tuple(partitions), (), "the coordinator is down")
    assert [(s.topic, s.partition) for s in status.offline] == [("t", 1), ("t", 2)]
    assert [(s.topic, s.partition) for s in status.under_replicated] == [("t", 0)]
    lines = status_lines(status)
    assert "Topics: 1, partitions: 4, offline: 2, under-replicated: 1" in lines
    offline = lines.index("Offline partitions:")
    assert [line.split() for line in lines[offline + 1 : offline + 4]] == [
        ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"],
        ["t", "1", "none", "node-b", "node-b"],
        ["t", "2", "node-c", "node-c", "node-c"],
    ]
    under = lines.index("Under-replicated partitions:")
    assert lines[under + 2].split() == ["t", "0", "0", "0,node-b", "0"]
    assert "Consumer groups: unknown (the group coordinator did not answer: the coordinator is down)" in lines
    assert lines[-1] == "Status: OFFLINE (2 partitions without a leader)"


def test_long_partition_lists_are_cut_to_one_screen() -> None:
    partitions = tuple(state("t", p, "node-a", "node-a,node-b", "node-a") for p in range(MAX_ROWS + 5))
    lines = status_lines(ClusterStatus("c", "node-a", BROKERS, partitions, (), None))
    under = lines.index("Under-replicated partitions:")
    assert len([line for line in lines[under + 2 :] if line.split()[:1] == ["t"]]) == MAX_ROWS
    assert "  ... and 5 more (raybroker topics --describe lists them all)" in lines
    assert lines[-1] == "Status: DEGRADED (15 under-replicated)"


@pytest.mark.ray
def test_status_of_a_running_broker_reads_its_brokers_and_the_groups_lag(
    start_test_broker: Callable[..., tuple[Any, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    start_test_broker(log_dirs_count=1)
    committed_group(TOPIC, GROUP, 10, {0: 2, 1: 5})

    code = main(["status"])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    lines = out.splitlines()
    node = ray.get_runtime_context().get_node_id()
    nodes = {n["NodeID"]: n for n in ray.nodes()}
    epoch = call(controller().metadata_quorum.remote())["epoch"]
    assert lines[1] == f"Controller: broker {node} (Ray node {node}), epoch {epoch}"  # no Kafka listener runs here
    assert "Metadata log: on the controller's node only (metadata.replication.factor 1, or one broker)" in lines
    metrics = f"http://{nodes[node]['NodeManagerAddress']}:{nodes[node]['MetricsExportPort']}/metrics"
    assert lines[4].split() == ["-", node, nodes[node]["NodeManagerAddress"], "-", metrics]
    # the topic and __consumer_offsets (FAST_BROKER_PROPERTIES: 2 partitions)
    assert "Topics: 2, partitions: 4, offline: 0, under-replicated: 0" in lines
    assert [GROUP, TOPIC, "2", "3"] in [line.split() for line in lines]  # (5 - 2) + (5 - 5)
    assert lines[-1] == "Status: OK"
