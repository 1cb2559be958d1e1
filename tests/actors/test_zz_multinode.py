"""Two Ray nodes on this machine (`ray.cluster_utils.Cluster`: two raylets, one GCS), each with its own log dirs
and its own broker started ON that node: partitions spread over the nodes (fewest first), each partition
actor runs on the node whose disk holds its folder, and a client reaches all of them.

This module needs its own Ray cluster: it stops the shared session's broker and Ray first, and restores
nothing. `OWNS_RAY` makes `tests/conftest.py` run it after every other test of the session (and its name sorts
last in `tests/actors/`), so the session's Ray is not needed again afterwards."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.calls import call, get_actor
from actors.clients.broker import Broker, stop_broker
from actors.core.transactions.transaction_metadata import TxnError
from actors.options import NAMESPACE, kafka_listener_name, transaction_coordinator_name
from storage import file_names
from storage.errors import BrokerNotAvailableError
from storage.records.record_batch import iter_batches
from tests.actors.support import release_session_ray, start_broker_on, wait_for
from tests.storage.builders import Rec, as_recs, batch_bytes, kafka_decode

pytestmark = pytest.mark.ray
OWNS_RAY = True

# Each node is a raylet plus its agents (~300 MiB) and every actor a process (~120 MiB): two nodes with one
# logical CPU each keep this module within a few GiB. The object store only carries small
# batches here, so 128 MiB per node instead of 30 % of RAM.
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 128 * 1024 * 1024}


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Path]]]:
    """A fresh two-node cluster with a broker on each node; node id -> that node's log dirs."""
    release_session_ray()
    os.environ["RAY_LOG_TO_DRIVER"] = "0"  # inherited by both raylets and their workers
    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False})
    try:
        cluster.add_node(**NODE_ARGS)
        ray.init(address=cluster.address, namespace="raybroker", log_to_driver=False, logging_level="ERROR")
        cluster.wait_for_nodes()
        root = tmp_path_factory.mktemp("multinode")
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        dirs = {node: [root / f"node{index}-dir{d}" for d in range(2)] for index, node in enumerate(nodes)}
        for node in nodes:
            start_brokers_on(node, dirs[node])
        yield dirs
        stop_broker()
    finally:
        ray.shutdown()
        cluster.shutdown()


def start_brokers_on(node: str, log_dirs: list[Path]) -> None:
    """Starts the broker of `node` over `log_dirs`; its Kafka `node.id` is the one the dirs were made with."""
    properties = {
        "log.dirs": ",".join(str(d) for d in log_dirs),
        "node.id": log_dirs[0].name.split("-")[0].removeprefix("node"),
        "offsets.topic.num.partitions": "2",
        "log.initial.task.delay.ms": "200",
        # A restart re-opens every partition: a few at once per dir rather than one after the other.
        "num.recovery.threads.per.data.dir": "4",
        # The tests follow each partition's own actor process to its node.
        "log.partitions.per.process": "1",
        # A replication throttle measured over 2 windows of 1 s: a throttled move's first burst is one second's worth.
        "replication.quota.window.num": "2",
        "replication.quota.window.size.seconds": "1",
    }
    start_broker_on(node, properties)


def actor_table_entry(handle: Any) -> dict[str, Any]:
    """The GCS's record of an actor (the public state API needs the dashboard, which is off)."""
    return ray._private.state.actors(actor_id=handle._actor_id.hex())


def raylet_node_id(pid: int) -> str:
    """The node id on the command line of the raylet that spawned worker `pid`: the OS's view of its node."""
    for argument in psutil.Process(pid).parent().cmdline():
        if argument.startswith("--node_id="):
            return argument.split("=", 1)[1]
    raise AssertionError(f"the parent of {pid} is not a raylet")


def test_partitions_spread_over_nodes_and_run_where_their_folders_are(two_nodes: dict[str, list[Path]]) -> None:
    client = Broker.connect()
    assert call(client.controller.brokers.remote()) == sorted(two_nodes)
    # The first broker created __consumer_offsets alone; the controller grows it to both brokers (its replication
    # factor capped at the brokers running) before the new topic is placed, so the placement sees 2 replicas each.
    wait_for(
        lambda: all(len(state.replicas) == 2 for state in client.topic("__consumer_offsets").states()),
        60.0,
        "__consumer_offsets on both brokers",
    )
    topic = call(client.controller.create_topic.remote("spread", 6))
    # Fewest replicas first: 3 of the 6 go to each broker, and each leads 3 of them.
    replicas = dict.fromkeys(two_nodes, 0)
    for name in ("spread", "__consumer_offsets"):
        for state in client.topic(name).states():
            for node in state.replicas:
                replicas[node] += 1
    assert sorted(replicas.values()) == [5, 5]
    assert sorted(list(topic.partitions.values()).count(node) for node in two_nodes) == [3, 3]
    for partition, node in topic.partitions.items():
        handle = client.partition("spread", partition)
        state = call(handle.state.remote())
        assert Path(state.directory).parent in two_nodes[node]
        entry = actor_table_entry(handle)
        assert entry["Address"]["NodeID"] == node and entry["Pid"] == state.pid
        assert raylet_node_id(state.pid) == node


def test_a_client_reaches_every_partition_on_every_node(two_nodes: dict[str, list[Path]]) -> None:
    client = Broker.connect()
    call(client.controller.create_topic.remote("reach", 4))
    oracle: dict[int, list[Rec]] = {}
    now_ms = int(time.time() * 1000)  # recent: the default 7-day retention would delete older records
    for partition in range(4):
        records = [Rec(f"k{i}".encode(), f"p{partition}-v{i}".encode(), now_ms + i) for i in range(5)]
        info = call(client.partition("reach", partition).append.remote(batch_bytes(records)))
        assert info.first_offset == 0
        oracle[partition] = records
    for partition, records in oracle.items():
        got = kafka_decode(call(client.partition("reach", partition).read.remote(0)))
        assert as_recs(got) == records
    nodes = set(client.topic("reach").partitions.values())
    assert nodes == set(two_nodes)
    folders = {
        node: sorted(entry.name for d in dirs for entry in d.iterdir() if entry.name.startswith("reach-"))
        for node, dirs in two_nodes.items()
    }
    expected = {
        node: sorted(
            file_names.partition_dir_name("reach", p) for p, n in client.topic("reach").partitions.items() if n == node
        )
        for node in two_nodes
    }
    assert folders == expected


def test_kafka_clients_bootstrap_from_one_node_and_reach_the_other_through_metadata(
    two_nodes: dict[str, list[Path]],
) -> None:
    """Each node's listener announces its broker; Metadata names both brokers and each partition's leader is the
    broker of its node, so a client bootstrapped from node 0's listener produces to and fetches from node 1's. A
    second node claiming a `node.id` already in use is refused with a message naming it."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    first, second = sorted(two_nodes)

    def listen(node: str, broker_id: int) -> str:
        config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": str(broker_id)})
        return start_kafka_listeners(config, node).bootstrap_servers

    bootstrap = listen(first, 0)
    with pytest.raises(BrokerNotAvailableError, match=r"node\.id 0 is already"):
        listen(second, 0)
    listen(second, 1)
    broker_ids = {first: 0, second: 1}
    client = Broker.connect()
    call(client.controller.create_topic.remote("wire-spread", 4))
    hosts = client.topic("wire-spread").partitions
    assert set(hosts.values()) == {first, second}

    described = AdminClient({"bootstrap.servers": bootstrap}).list_topics("wire-spread", timeout=30)
    assert sorted(described.brokers) == [0, 1]
    leaders = {p: meta.leader for p, meta in described.topics["wire-spread"].partitions.items()}
    assert leaders == {p: broker_ids[node] for p, node in hosts.items()}

    now_ms = int(time.time() * 1000)
    sent = {(p, f"value-{p}-{i}".encode()) for p in range(4) for i in range(5)}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition, value in sorted(sent):
        producer.produce("wire-spread", value=value, partition=partition, timestamp=now_ms)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wire-spread", "enable.auto.commit": "false"})
    try:
        consumer.assign([TopicPartition("wire-spread", p, 0) for p in range(4)])
        received: set[tuple[int, bytes]] = set()
        deadline = time.monotonic() + 30
        while received != sent and time.monotonic() < deadline:
            for message in consumer.consume(100, 1.0):
                assert message.error() is None, message.error()
                received.add((message.partition(), message.value()))
    finally:
        consumer.close()
    assert received == sent
    for node in (first, second):
        listener = ray.get_actor(kafka_listener_name(node, 0), namespace=NAMESPACE)
        assert call(listener.statistics.remote()).connections_accepted > 0


THROTTLE_B_S = 200_000


def test_a_throttled_reassignment_copies_at_the_throttles_rate_and_verify_clears_it(
    two_nodes: dict[str, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`raybroker reassign --execute --throttle` sets Kafka's throttles (the moving partition's throttled replicas on
    its topic, both rates on both brokers), and the new replica on the other node copies about 1.2 MB at that rate
    (the sensor's first window aside), its fetches asking its node's log manager, every record there; `--verify` then
    clears them."""
    from actors.clients.admin import Admin
    from actors.clients.producer import Producer
    from cluster.cli.main import main as cli_main
    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    for broker_id, node in enumerate(sorted(two_nodes)):
        config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": str(broker_id)})
        start_kafka_listeners(config, node)
    admin = Admin()
    admin.create_topic("slowed", partitions=1, replication_factor=1)
    (source,) = admin.describe_topic("slowed").partitions[0].replicas
    (target,) = [node for node in two_nodes if node != source]
    names = admin.describe_cluster().node_ids
    values = [f"{i:06d}".encode() * 1_000 for i in range(200)]
    with Producer(acks="all", linger_ms=2) as producer:
        for future in [producer.send("slowed", value, partition=0) for value in values]:
            future.result(timeout=60)
    plan = tmp_path / "plan.json"
    moved = [{"topic": "slowed", "partition": 0, "replicas": [names[target]]}]
    plan.write_text(json.dumps({"version": 1, "partitions": moved}), encoding="utf-8")

    def reassign(*arguments: str) -> str:
        code = cli_main(["reassign", *arguments, "--reassignment-json-file", str(plan)])
        captured = capsys.readouterr()
        assert (code, captured.err) == (0, ""), captured.err
        return captured.out

    started = time.monotonic()
    out = reassign("--execute", "--throttle", str(THROTTLE_B_S))
    assert f"The inter-broker throttle limit was set to {THROTTLE_B_S} B/s" in out, out
    for node in (source, target):
        assert admin.broker_configs(str(names[node]))[0] == {
            "leader.replication.throttled.rate": str(THROTTLE_B_S),
            "follower.replication.throttled.rate": str(THROTTLE_B_S),
        }
    config = admin.describe_topic("slowed").config
    assert config["leader.replication.throttled.replicas"] == f"0:{names[source]}"
    assert config["follower.replication.throttled.replicas"] == f"0:{names[target]}"
    wait_for(lambda: admin.describe_topic("slowed").partitions[0].replicas == (target,), timeout_s=120, what="the move")
    moved_s = time.monotonic() - started
    size = sum(len(value) for value in values)
    assert moved_s >= (size - 2 * THROTTLE_B_S) / THROTTLE_B_S, moved_s
    assert admin.describe_topic("slowed").partitions[0].log_end_offset == len(values)
    assert reassign("--verify").splitlines()[1:] == [
        "Reassignment of partition slowed-0 is completed.",
        "Clearing broker-level throttles on brokers 0,1",
        "Clearing topic-level throttles on topic slowed",
    ]
    assert admin.broker_configs(str(names[source])) == ({}, {})
    assert not any("throttled" in key for key in admin.describe_topic("slowed").config)


@ray.remote(num_cpus=0)
def transaction_through_a_view(
    transactional_id: str, partitions: list[tuple[str, int]]
) -> tuple[str | None, list[Any]]:
    """One committed transaction through a `TransactionView` in this task's process, as a listener on this node
    makes it: (where its steady-state calls went, None for Ray; the coordinator's answers)."""
    import asyncio

    from cluster.protocol.views.transaction_transport import RayTransactionTransport
    from cluster.protocol.views.transaction_view import TransactionView
    from storage.config.transaction_config import TransactionConfig
    from storage.errors import CoordinatorLoadInProgressError

    transport = RayTransactionTransport(TransactionConfig(transaction_state_log_num_partitions=1))
    view = TransactionView(transport)

    async def transaction() -> list[Any]:
        # As a client retries it: the coordinator answers COORDINATOR_LOAD_IN_PROGRESS until it has loaded.
        deadline = time.monotonic() + 30
        while True:
            try:
                initialized = await view.init_producer_id(transactional_id, 60_000, -1, -1)
                break
            except CoordinatorLoadInProgressError:
                assert time.monotonic() < deadline, "the coordinator did not load within 30 s"
                await asyncio.sleep(0.05)
        producer = (transactional_id, initialized.producer_id, initialized.producer_epoch)
        return [
            initialized.error,
            await view.add_partitions(*producer, partitions),
            await view.verify_partitions(*producer, partitions),
            await view.end_transaction(*producer, True),
        ]

    answers = asyncio.run(transaction())
    return transport.channel_address, answers


def test_a_listener_on_the_coordinators_node_calls_it_over_its_channel_and_one_elsewhere_through_ray(
    two_nodes: dict[str, list[Path]],
) -> None:
    """Both commit, each transaction's markers land on partitions of both nodes (over the append channel on the
    coordinator's node, through Ray on the other), and only the view on the coordinator's node holds a channel."""
    client = Broker.connect()
    call(client.controller.create_topic.remote("txn-spread", 4))
    hosts = client.topic("txn-spread").partitions
    assert set(hosts.values()) == set(two_nodes)
    # One partition led on each node.
    partitions = sorted({node: ("txn-spread", partition) for partition, node in hosts.items()}.values())
    channels = {}
    for index, node in enumerate(sorted(two_nodes)):
        pinned = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        address, answers = ray.get(
            transaction_through_a_view.options(scheduling_strategy=pinned).remote(f"spread-{index}", partitions)
        )
        assert answers == [TxnError.NONE, TxnError.NONE, dict.fromkeys(partitions, TxnError.NONE), TxnError.NONE]
        channels[node] = address
    coordinator_node = actor_table_entry(get_actor(transaction_coordinator_name()))["Address"]["NodeID"]
    assert {node: address is not None for node, address in channels.items()} == {
        node: node == coordinator_node for node in two_nodes
    }
    deadline = time.monotonic() + 30
    while True:
        committed = [
            sum(1 for batch in iter_batches(call(client.partition(*tp).read.remote(0))) if batch.is_control)
            for tp in partitions
        ]
        if committed == [2, 2] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert committed == [2, 2]


def test_swapped_disks_are_found_on_their_new_nodes(two_nodes: dict[str, list[Path]]) -> None:
    """What a full Ray restart looks like to the controller: the folders are where they were, the node ids
    holding them are not. Here each node's dirs move to the other node; the node holding the metadata dir
    starts first, as the one that started the cluster must."""
    client = Broker.connect()
    call(client.controller.create_topic.remote("moved", 4))
    written = {}
    for partition in range(4):
        records = [Rec(b"k", f"moved-{partition}".encode(), int(time.time() * 1000))]
        call(client.partition("moved", partition).append.remote(batch_bytes(records)))
        written[partition] = records
    before = client.topic("moved").partitions
    stop_broker()
    first, second = sorted(two_nodes)
    start_brokers_on(second, two_nodes[first])  # two_nodes[first][0] holds __cluster_metadata-0
    start_brokers_on(first, two_nodes[second])
    client = Broker.connect()
    swap = {first: second, second: first}
    assert client.topic("moved").partitions == {p: swap[node] for p, node in before.items()}
    for partition, records in written.items():
        handle = client.partition("moved", partition)
        assert as_recs(kafka_decode(call(handle.read.remote(0)))) == records
        assert raylet_node_id(call(handle.state.remote()).pid) == swap[before[partition]]
