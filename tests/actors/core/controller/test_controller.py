"""The plain controller without Ray: real storage log managers as its nodes' brokers (one per simulated node, each
over its own log dir), a `MockClock`, and the set of live nodes handed to `check_brokers` as the Ray actor's monitor
hands it. Checked against Kafka's rules: placement on distinct brokers, clean elections only from the ISR, the
preferred leader back once in sync, AlterPartition fenced by leader epoch, and the metadata log replayed after a
restart with everything in it."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from actors.core.controller import metadata_replication
from actors.core.controller.controller import Controller
from actors.core.controller.group_config_store import GroupConfigVersion
from actors.core.controller.log_manager_broker import LogManagerBroker
from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from actors.core.security.acl_bindings import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from actors.core.security.scram import ScramCredential
from storage.clock import MockClock
from storage.config.broker_config import BrokerConfig
from storage.errors import (
    BrokerNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    NotControllerError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage.file_names import partition_dir_name
from storage.files.partition_metadata import PartitionMetadata, read_partition_metadata
from storage.kafka_uuid import RESERVED, uuid_text
from storage.logdir import metadata_mirror
from storage.logdir.log_dirs import METADATA_TOPIC
from storage.logdir.log_manager import LogManager
from storage.records.file_records import iter_any_batches
from tests.actors.core.controller.test_assignment import check_transition

NODES = ("node-a", "node-b", "node-c")
REBALANCE_INTERVAL_S = 300


class RecordedReplicas:
    """The replicas' notifier: keeps every (node, state) the controller pushes, the oracle of what it told."""

    def __init__(self) -> None:
        self.told: list[tuple[str, LeaderAndIsr]] = []
        self.forgotten: list[str] = []

    def update_replication(self, node: str, state: LeaderAndIsr) -> None:
        self.told.append((node, state))

    def forget_node(self, node: str) -> None:
        self.forgotten.append(node)

    def latest(self, node: str, topic: str, partition: int) -> LeaderAndIsr | None:
        states = [s for n, s in self.told if n == node and (s.topic, s.partition) == (topic, partition)]
        return states[-1] if states else None


class Cluster:
    """Simulated nodes, each with a started `LogManager` under `root/<node>`, and a controller over them."""

    def __init__(self, root: Path, clock: MockClock, properties: dict[str, str] | None = None) -> None:
        self.root = root
        self.clock = clock
        self.properties = {"log.dirs": str(root / "metadata"), **(properties or {})}
        self.managers: dict[str, LogManager] = {}
        self.replicas = RecordedReplicas()
        self.controller = self.start_controller()

    def start_node(self, node: str) -> LogManagerBroker:
        if node not in self.managers:
            manager = LogManager([self.root / node], clock=self.clock)
            manager.startup()
            self.managers[node] = manager
        return LogManagerBroker(self.managers[node])

    def find_broker(self, node: str) -> LogManagerBroker:
        if node not in self.managers:
            raise BrokerNotAvailableError(f"no broker on {node}")
        return LogManagerBroker(self.managers[node])

    def start_controller(
        self,
        running: Iterable[str] | None = None,
        metadata_dir: str = "metadata",
        group_config_changed: Callable[[str, GroupConfigVersion], None] | None = None,
    ) -> Controller:
        """A controller over `root/metadata_dir` that finds the brokers of `running` (default: every node started),
        telling `group_config_changed` of each change of a group's configs."""
        return Controller(
            self.root / metadata_dir,
            BrokerConfig.from_properties(self.properties),
            clock=self.clock,
            brokers={node: self.find_broker(node) for node in (self.managers if running is None else running)},
            find_broker=self.find_broker,
            replicas=self.replicas,
            group_config_changed=group_config_changed,
        )

    def register(self, *nodes: str) -> None:
        """Starts and registers `nodes`, then catches the metadata mirrors up, as the Ray host's mirror thread does
        within `MIRROR_SYNC_INTERVAL_S`."""
        for node in nodes:
            self.start_node(node)
            self.controller.register_broker(node)
        self.controller.sync_metadata_mirrors()

    def close(self) -> None:
        self.controller.close()
        for manager in self.managers.values():
            manager.shutdown()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path, MockClock())
    running.register(*NODES)
    try:
        yield running
    finally:
        running.close()


# --- topics and placement ----------------------------------------------------------------------------------


def test_a_topic_is_placed_on_distinct_brokers_and_created_on_each(cluster: Cluster) -> None:
    topic = cluster.controller.create_topic("orders", 6, replication_factor=2)
    for partition in range(6):
        state = topic.state(partition)
        assert len(set(state.replicas)) == 2
        assert state.leader == state.replicas[0] and state.isr == state.replicas and state.leader_epoch == 0
        for node in NODES:
            held = {(p.topic, p.partition) for p in cluster.managers[node].placements()}
            assert (("orders", partition) in held) == (node in state.replicas)
    # 12 replicas over 3 brokers: 4 each, and each broker leads 2 of the 6 partitions.
    counts = {node: sum(node in topic.state(p).replicas for p in range(6)) for node in NODES}
    assert counts == dict.fromkeys(NODES, 4)
    assert sorted(topic.state(p).leader for p in range(6)) == sorted(NODES * 2)
    # Replicated partitions are told their state, on each of their replicas.
    for partition in range(6):
        for node in topic.state(partition).replicas:
            assert cluster.replicas.latest(node, "orders", partition) == cluster.controller.partition_state(
                "orders", partition
            )


def test_validate_only_places_but_creates_and_writes_nothing(cluster: Cluster) -> None:
    topic = cluster.controller.create_topic("dry", 2, validate_only=True, replication_factor=3)
    assert topic.replication_factor == 3
    assert "dry" not in cluster.controller.list_topics()
    assert all(not manager.placements() for manager in cluster.managers.values())


@pytest.mark.parametrize("replication_factor", [0, 4, "2"])
def test_a_replication_factor_outside_the_live_brokers_is_refused(cluster: Cluster, replication_factor: object) -> None:
    with pytest.raises(InvalidReplicationFactorError):
        cluster.controller.create_topic("t", 1, replication_factor=replication_factor)  # type: ignore[arg-type]
    assert cluster.controller.list_topics() == []


def test_names_kafka_refuses_are_refused(cluster: Cluster) -> None:
    cluster.controller.create_topic("a.b", 1)
    with pytest.raises(TopicExistsError):
        cluster.controller.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        cluster.controller.create_topic("a_b", 1)
    with pytest.raises(InvalidTopicError, match="reserved"):
        cluster.controller.create_topic("__cluster_metadata", 1)


def test_no_registered_broker_means_no_topic_and_no_new_partition(cluster: Cluster) -> None:
    cluster.controller.create_topic("t", 1)
    cluster.controller.check_brokers(set())
    with pytest.raises(InvalidReplicationFactorError, match="0 available brokers"):
        cluster.controller.create_topic("u", 1)
    with pytest.raises(BrokerNotAvailableError):
        cluster.controller.add_partitions("t", 2)
    assert cluster.controller.describe_topic("t").partitions.keys() == {0}


def test_a_node_without_a_broker_cannot_register(tmp_path: Path) -> None:
    lonely = Cluster(tmp_path, MockClock())
    try:
        with pytest.raises(BrokerNotAvailableError):
            lonely.controller.register_broker("node-z")
        assert lonely.controller.brokers() == []
    finally:
        lonely.close()


def test_add_partitions_grows_and_places_the_new_ones(cluster: Cluster) -> None:
    cluster.controller.create_topic("grow", 2, replication_factor=2)
    grown = cluster.controller.add_partitions("grow", 5)
    assert sorted(grown.partitions) == [0, 1, 2, 3, 4]
    for partition in range(2, 5):
        for node in grown.state(partition).replicas:
            assert ("grow", partition) in {(p.topic, p.partition) for p in cluster.managers[node].placements()}


def test_configs_are_validated_replaced_merged_and_applied_to_every_replica(cluster: Cluster) -> None:
    cluster.controller.create_topic("conf", 2, {"retention.ms": "1000"}, replication_factor=3)
    with pytest.raises(InvalidConfigError):
        cluster.controller.set_topic_config("conf", {"retention.ms": "soon"})
    assert cluster.controller.describe_topic("conf").config == {"retention.ms": "1000"}
    cluster.controller.alter_topic_config("conf", {"segment.bytes": "1048576"})
    assert cluster.controller.describe_topic("conf").config == {"retention.ms": "1000", "segment.bytes": "1048576"}
    cluster.controller.set_topic_config("conf", {"cleanup.policy": "compact"})
    assert cluster.controller.topic_configs()["conf"] == {"cleanup.policy": "compact"}
    for manager in cluster.managers.values():
        config = manager.config_for("conf")
        assert config.compact and config.retention_ms == manager.default_config.retention_ms


def test_delete_removes_every_replica_and_stays_deleted_after_a_restart(cluster: Cluster) -> None:
    cluster.controller.create_topic("gone", 3, replication_factor=2)
    cluster.controller.delete_topic("gone")
    assert all(not manager.placements() for manager in cluster.managers.values())
    with pytest.raises(UnknownTopicOrPartitionError):
        cluster.controller.describe_topic("gone")
    cluster.controller.close()
    cluster.controller = cluster.start_controller()
    assert cluster.controller.list_topics() == []


# --- topic ids (KIP-516) -------------------------------------------------------------------------------------


def replica_folders(cluster: Cluster, topic: str) -> list[Path]:
    return [
        Path(p.directory) / f"{p.topic}-{p.partition}"
        for manager in cluster.managers.values()
        for p in manager.placements()
        if p.topic == topic
    ]


def test_every_topic_gets_its_own_random_id_which_each_replica_folder_keeps(cluster: Cluster) -> None:
    orders = cluster.controller.create_topic("orders", 2, replication_factor=2)
    payments = cluster.controller.create_topic("payments", 1)
    assert orders.topic_id not in RESERVED and payments.topic_id not in RESERVED
    assert orders.topic_id != payments.topic_id
    assert cluster.controller.topic_names() == {orders.topic_id: "orders", payments.topic_id: "payments"}
    folders = replica_folders(cluster, "orders")
    assert len(folders) == 4
    for folder in folders:
        # Kafka's bytes: two lines, the second without a line end.
        expected = f"version: 0\ntopic_id: {uuid_text(orders.topic_id)}".encode()
        assert (folder / "partition.metadata").read_bytes() == expected
        assert read_partition_metadata(folder) == PartitionMetadata(0, orders.topic_id)


def test_validate_only_draws_an_id_but_keeps_none(cluster: Cluster) -> None:
    cluster.controller.create_topic("dry", 1, validate_only=True)
    assert cluster.controller.topic_names() == {}


def test_a_topic_created_again_under_its_name_gets_a_new_id(cluster: Cluster) -> None:
    first = cluster.controller.create_topic("again", 1).topic_id
    cluster.controller.delete_topic("again")
    second = cluster.controller.create_topic("again", 1).topic_id
    assert second != first
    assert cluster.controller.topic_names() == {second: "again"}
    assert [read_partition_metadata(folder) for folder in replica_folders(cluster, "again")] == [
        PartitionMetadata(0, second)
    ]


def test_topic_ids_survive_a_restart_and_a_topic_record_without_one_gets_one_once(cluster: Cluster) -> None:
    kept = cluster.controller.create_topic("kept", 1).topic_id
    grown = cluster.controller.add_partitions("kept", 2)
    altered = cluster.controller.alter_topic_config("kept", {"retention.ms": "5000"})
    assert grown.topic_id == altered.topic_id == kept
    # A record as a controller from before topic ids wrote it.
    cluster.controller._write("topic/legacy", {"partitions": {"0": "node-a"}, "config": {}})
    cluster.controller.close()
    cluster.controller = cluster.start_controller()
    names = cluster.controller.topic_names()
    legacy = cluster.controller.describe_topic("legacy").topic_id
    assert names == {kept: "kept", legacy: "legacy"} and legacy not in RESERVED
    cluster.controller.close()
    cluster.controller = cluster.start_controller()
    assert cluster.controller.topic_names() == names


# --- elections -----------------------------------------------------------------------------------------------


def led_by(cluster: Cluster, node: str) -> list[int]:
    topic = cluster.controller.describe_topic("t")
    return [p for p in topic.partitions if topic.state(p).leader == node]


def test_a_lost_broker_leaves_every_isr_and_its_partitions_elect_from_the_isr(cluster: Cluster) -> None:
    cluster.controller.create_topic("t", 6, replication_factor=3)
    before = {p: cluster.controller.partition_state("t", p) for p in range(6)}
    changed = cluster.controller.check_brokers({"node-b", "node-c"})
    assert cluster.controller.brokers() == ["node-b", "node-c"]
    assert {(s.topic, s.partition) for s in changed} == {("t", p) for p in range(6)}
    for partition in range(6):
        old, new = before[partition], cluster.controller.partition_state("t", partition)
        assert "node-a" not in new.isr and new.leader in old.isr
        # A new leader raises the epoch; a partition that keeps its leader only changes its ISR.
        assert new.leader_epoch == old.leader_epoch + (old.leader == "node-a")
        assert new.version > old.version
        assert not any(node == "node-a" for node, state in cluster.replicas.told if state == new)
    assert led_by(cluster, "node-a") == []


def metadata_log_bytes(cluster: Cluster) -> int:
    """Bytes the controller's metadata log holds on disk (it flushes each record as it writes it)."""
    return sum(path.stat().st_size for path in (cluster.root / "metadata").rglob("*.log"))


def test_a_lost_broker_writes_each_topics_changes_once_not_once_per_partition(cluster: Cluster) -> None:
    """A topic's record holds every partition's state, so a broker's loss that changes all of a topic's partitions
    writes the topic once (Kafka writes one small record per changed partition: the bytes grow with the partitions
    changed, not with their square)."""
    partitions = 300
    before_create = metadata_log_bytes(cluster)
    cluster.controller.create_topic("t", partitions, replication_factor=2)
    topic_bytes = metadata_log_bytes(cluster) - before_create
    before_loss = metadata_log_bytes(cluster)
    changed = cluster.controller.check_brokers({"node-b", "node-c"})
    named_a = [p for p in range(partitions) if "node-a" in cluster.controller.partition_state("t", p).replicas]
    assert sorted(state.partition for state in changed) == named_a
    assert len(changed) > partitions / 2
    assert metadata_log_bytes(cluster) - before_loss < 2 * topic_bytes

    def states() -> dict[int, tuple[object, ...]]:
        replayed = cluster.controller.partition_states()
        return {s.partition: (s.leader, s.leader_epoch, s.isr, s.version) for s in replayed}

    after_loss = states()
    cluster.controller.close()
    cluster.controller = cluster.start_controller(("node-b", "node-c"))
    assert states() == after_loss, "the replayed metadata log lost a change"


def test_one_partitions_isr_change_writes_that_partition_not_its_topic_and_replays(cluster: Cluster) -> None:
    """An ISR change of one partition of a large topic writes a record of that partition (Kafka's
    PartitionChangeRecord), a few hundred bytes whatever the topic's size; a restarted controller replays it over the
    topic's record; a topic deleted and created again under its name does not get the old partition's state back."""
    cluster.controller.create_topic("t", 300, replication_factor=2)
    state = cluster.controller.partition_state("t", 7)
    before = metadata_log_bytes(cluster)
    shrunk = cluster.controller.alter_partition("t", 7, state.leader, state.leader_epoch, state.version, [state.leader])
    assert shrunk.isr == (state.leader,)
    assert metadata_log_bytes(cluster) - before < 1_000
    cluster.controller.close()
    cluster.controller = cluster.start_controller()
    replayed = cluster.controller.partition_state("t", 7)
    assert (replayed.leader, replayed.leader_epoch, replayed.isr, replayed.version) == (
        shrunk.leader,
        shrunk.leader_epoch,
        shrunk.isr,
        shrunk.version,
    )
    cluster.controller.delete_topic("t")
    cluster.controller.create_topic("t", 300, replication_factor=2)
    cluster.controller.close()
    cluster.controller = cluster.start_controller()
    assert len(cluster.controller.partition_state("t", 7).isr) == 2


SESSION_MS = 9000  # Kafka's broker.session.timeout.ms, the default


def beat(cluster: Cluster, ms: int, nodes: tuple[str, ...], step_ms: int = 1000) -> None:
    """`ms` of the clock in monitor passes `step_ms` apart, each node of `nodes` sending a heartbeat at each."""
    for _ in range(ms // step_ms):
        cluster.clock.sleep(step_ms)
        for node in nodes:
            assert cluster.controller.broker_heartbeat(node)
        cluster.controller.check_brokers(set(NODES))


def test_a_broker_silent_for_its_session_is_fenced_while_its_node_lives_and_registers_again(cluster: Cluster) -> None:
    """Kafka's broker fencing: a paused broker's node stays alive to Ray, but its heartbeats stop; once
    `broker.session.timeout.ms` passed it leaves every ISR and its partitions elect new leaders."""
    cluster.controller.create_topic("t", 6, replication_factor=3)
    before = {p: cluster.controller.partition_state("t", p) for p in range(6)}
    beat(cluster, SESSION_MS, ("node-b", "node-c"))
    assert cluster.controller.brokers() == list(NODES)  # silent for exactly the session: not yet
    beat(cluster, 1000, ("node-b", "node-c"))
    assert cluster.controller.brokers() == ["node-b", "node-c"]
    for partition in range(6):
        old, new = before[partition], cluster.controller.partition_state("t", partition)
        assert "node-a" not in new.isr and new.leader in old.isr and new.leader != "node-a"
    assert cluster.controller.broker_heartbeat("node-a") is False  # fenced: it takes no part until it registers
    # Fenced, it was told nothing; registered again, its replicas learn every partition's state (a paused leader
    # learns it leads no more).
    assert all(cluster.replicas.latest("node-a", "t", p) == before[p] for p in range(6))
    cluster.register("node-a")
    now = {p: cluster.controller.partition_state("t", p) for p in range(6)}
    assert all(cluster.replicas.latest("node-a", "t", p) == now[p] for p in range(6))
    beat(cluster, 2 * SESSION_MS, NODES)
    assert cluster.controller.brokers() == list(NODES)


def test_a_broker_that_never_registers_with_a_new_controller_is_lost_at_its_session_timeout(
    cluster: Cluster,
) -> None:
    """A node lost while no controller ran (with the head) is named by the states the next controller replays: once
    a session passed without its registering, its partitions elect from the rest or have no leader, and it leads
    again when it comes back."""
    cluster.controller.create_topic("t", 3, replication_factor=2)
    cluster.controller.create_topic("single", 3, replication_factor=1)
    cluster.controller.close()
    cluster.controller = cluster.start_controller(("node-a", "node-b"))
    named_c = [s for s in cluster.controller.partition_states() if "node-c" in s.replicas]
    assert any(s.leader == "node-c" for s in named_c)
    live = ("node-a", "node-b")
    beat(cluster, 8000, live)
    assert [s.leader for s in cluster.controller.partition_states() if "node-c" in s.replicas] == [
        s.leader for s in named_c
    ], "nothing changes within the session"
    beat(cluster, 2000, live)
    for state in cluster.controller.partition_states():
        if "node-c" not in state.replicas:
            continue
        if state.replicas == ("node-c",):
            assert (state.leader, state.isr) == (NO_LEADER, ("node-c",))
        else:
            assert state.leader in live and state.isr == tuple(n for n in state.replicas if n != "node-c")
    cluster.controller.register_broker("node-c")
    assert [s.leader for s in cluster.controller.partition_states() if s.replicas == ("node-c",)] == ["node-c"]


def test_an_absent_broker_whose_node_is_dead_leaves_the_isrs_with_a_registered_member_at_once(
    cluster: Cluster,
) -> None:
    """The head lost with its broker: the next controller's first pass takes the dead node out of every ISR that
    keeps a registered replica (their acks=all writes waited for it since the head was lost); a partition whose
    only in-sync replica was there waits for the session (a restarted cluster's brokers come back under new ids)."""
    cluster.controller.create_topic("t", 3, replication_factor=2)
    cluster.controller.create_topic("single", 3, replication_factor=1)
    cluster.controller.close()
    cluster.controller = cluster.start_controller(("node-a", "node-b"))
    before = {(s.topic, s.partition): s for s in cluster.controller.partition_states()}
    cluster.controller.check_brokers({"node-a", "node-b"})
    for state in cluster.controller.partition_states():
        was = before[(state.topic, state.partition)]
        if "node-c" not in was.isr or was.isr == ("node-c",):
            assert state == was, "nothing else changes before the session"
        else:
            assert state.isr == tuple(n for n in was.isr if n != "node-c") and state.leader in state.isr
    assert any("node-c" in s.isr and len(s.isr) > 1 for s in before.values()), "no partition to shrink"
    assert any(s.isr == ("node-c",) for s in before.values()), "no partition to leave alone"


def test_no_broker_is_fenced_after_the_controller_itself_stood_still(cluster: Cluster) -> None:
    """A gap of more than half a session between two monitor passes (the controller paused or starved) starts
    every session again: it cannot tell which broker was silent."""
    cluster.controller.create_topic("t", 3, replication_factor=3)
    cluster.controller.check_brokers(set(NODES))
    cluster.clock.sleep(3 * SESSION_MS)
    assert cluster.controller.check_brokers(set(NODES)) == []
    assert cluster.controller.brokers() == list(NODES)
    beat(cluster, SESSION_MS + 1000, ("node-a", "node-b"))
    assert cluster.controller.brokers() == ["node-a", "node-b"]


def test_the_last_broker_is_not_fenced(tmp_path: Path) -> None:
    """Fencing it would move nothing (no other broker could lead) and take every partition offline."""
    alone = Cluster(tmp_path, MockClock())
    try:
        alone.register("node-a")
        alone.controller.create_topic("t", 2)
        for _ in range(2 * SESSION_MS // 1000):
            alone.clock.sleep(1000)
            alone.controller.check_brokers({"node-a"})
        assert alone.controller.brokers() == ["node-a"]
        assert all(not alone.controller.partition_state("t", p).offline for p in range(2))
    finally:
        alone.close()


def test_election_is_clean_only_a_partition_whose_isr_is_gone_goes_offline(cluster: Cluster) -> None:
    cluster.controller.create_topic("t", 1, replication_factor=2)
    state = cluster.controller.partition_state("t", 0)
    leader = state.replicas[0]
    cluster.controller.alter_partition("t", 0, leader, state.leader_epoch, state.version, [leader])
    cluster.controller.check_brokers(set(NODES) - {leader})
    offline = cluster.controller.partition_state("t", 0)
    # The out-of-sync follower never leads; the ISR keeps the last member, who may lead when it returns.
    assert offline.leader == NO_LEADER and offline.offline and offline.isr == (leader,)
    cluster.register(leader)
    back = cluster.controller.partition_state("t", 0)
    assert back.leader == leader and back.leader_epoch > offline.leader_epoch


def test_the_preferred_leader_leads_again_once_in_sync_when_the_interval_passed(cluster: Cluster) -> None:
    cluster.controller.create_topic("t", 3, replication_factor=3)
    preferred = {p: cluster.controller.partition_state("t", p).replicas[0] for p in range(3)}
    cluster.controller.check_brokers({"node-b", "node-c"})
    cluster.register("node-a")
    for partition in [p for p, node in preferred.items() if node == "node-a"]:
        state = cluster.controller.partition_state("t", partition)
        assert state.leader != "node-a"
        cluster.controller.alter_partition(
            "t", partition, state.leader, state.leader_epoch, state.version, list(state.replicas)
        )
    cluster.clock.sleep(REBALANCE_INTERVAL_S * 1000 - 1)
    assert cluster.controller.check_brokers(set(NODES)) == []
    cluster.clock.sleep(1)
    cluster.controller.check_brokers(set(NODES))
    assert {p: cluster.controller.partition_state("t", p).leader for p in range(3)} == preferred


def test_no_rebalance_when_auto_leader_rebalance_is_off(tmp_path: Path) -> None:
    off = Cluster(tmp_path, MockClock(), {"auto.leader.rebalance.enable": "false"})
    try:
        off.register(*NODES)
        off.controller.create_topic("t", 3, replication_factor=3)
        off.controller.check_brokers({"node-b", "node-c"})
        off.register("node-a")
        moved = {p: off.controller.partition_state("t", p) for p in range(3)}
        for partition, state in moved.items():
            off.controller.alter_partition(
                "t", partition, state.leader, state.leader_epoch, state.version, list(state.replicas)
            )
        off.clock.sleep(REBALANCE_INTERVAL_S * 1000)
        off.controller.check_brokers(set(NODES))
        assert all(off.controller.partition_state("t", p).leader == moved[p].leader for p in range(3))
    finally:
        off.close()


# --- AlterPartition ------------------------------------------------------------------------------------------


def test_alter_partition_is_fenced_by_leader_and_epoch_and_checked(cluster: Cluster) -> None:
    """Kafka's controller checks (`ReplicationControlManager.validateAlterPartitionData`), in its order."""
    cluster.controller.create_topic("t", 1, replication_factor=3)
    state = cluster.controller.partition_state("t", 0)
    leader, second, third = state.replicas
    epoch, version = state.leader_epoch, state.version
    with pytest.raises(NotControllerError):
        cluster.controller.alter_partition("t", 0, leader, epoch + 1, version, [leader])
    with pytest.raises(NotControllerError):
        cluster.controller.alter_partition("t", 0, leader, epoch, version + 1, [leader])
    with pytest.raises(FencedLeaderEpochError):
        cluster.controller.alter_partition("t", 0, leader, epoch - 1, version, [leader])
    with pytest.raises(InvalidRequestError):
        cluster.controller.alter_partition("t", 0, second, epoch, version, [second])
    with pytest.raises(InvalidRequestError):
        cluster.controller.alter_partition("t", 0, leader, epoch, version, [second, third])
    with pytest.raises(InvalidRequestError):
        cluster.controller.alter_partition("t", 0, leader, epoch, version, [leader, "node-z"])
    assert cluster.controller.partition_state("t", 0) == state
    shrunk = cluster.controller.alter_partition("t", 0, leader, epoch, version, [third, leader])
    # The ISR keeps assignment order; the epoch stays, the version moves; every replica is told.
    assert shrunk.isr == (leader, third) and shrunk.leader_epoch == epoch
    assert shrunk.version == version + 1
    assert all(cluster.replicas.latest(node, "t", 0) == shrunk for node in state.replicas)
    assert cluster.controller.alter_partition("t", 0, leader, epoch, shrunk.version, [leader, third]) == shrunk


def test_alter_partition_from_a_state_the_isr_moved_past_is_refused_and_the_leader_told_it_again(
    cluster: Cluster,
) -> None:
    """INVALID_UPDATE_VERSION: a leader that asks from a partition epoch the controller moved past (the controller
    fenced a follower's broker, or the leader's answer was lost and it asks again) changes nothing, and is sent the
    partition's state again, as Kafka's broker reads the newer state from the metadata log."""
    cluster.controller.create_topic("t", 1, replication_factor=3)
    state = cluster.controller.partition_state("t", 0)
    leader, second, lost = state.replicas
    cluster.controller.check_brokers(set(NODES) - {lost})
    shrunk = cluster.controller.partition_state("t", 0)
    assert shrunk.isr == (leader, second) and shrunk.version > state.version
    told = len(cluster.replicas.told)
    with pytest.raises(InvalidUpdateVersionError):
        cluster.controller.alter_partition("t", 0, leader, state.leader_epoch, state.version, [leader, lost])
    assert cluster.controller.partition_state("t", 0) == shrunk
    assert cluster.replicas.told[told:] == [(leader, shrunk)]


def test_alter_partition_refuses_to_add_a_replica_whose_broker_is_lost(cluster: Cluster) -> None:
    """Kafka's INELIGIBLE_REPLICA: a leader that saw a follower catch up before its node was lost cannot bring it
    back into the ISR; once its broker registers again it can."""
    cluster.controller.create_topic("t", 1, replication_factor=3)
    state = cluster.controller.partition_state("t", 0)
    leader, _, lost = state.replicas
    cluster.controller.check_brokers(set(NODES) - {lost})
    shrunk = cluster.controller.partition_state("t", 0)
    assert lost not in shrunk.isr and shrunk.leader == leader
    with pytest.raises(IneligibleReplicaError):
        cluster.controller.alter_partition("t", 0, leader, shrunk.leader_epoch, shrunk.version, list(state.replicas))
    assert cluster.controller.partition_state("t", 0) == shrunk
    cluster.register(lost)
    back = cluster.controller.partition_state("t", 0)
    expanded = cluster.controller.alter_partition("t", 0, leader, back.leader_epoch, back.version, list(state.replicas))
    assert expanded.isr == state.replicas


# --- the metadata log ----------------------------------------------------------------------------------------


def test_a_restarted_controller_replays_everything_from_its_metadata_log(cluster: Cluster) -> None:
    cluster.controller.create_topic("kept", 2, {"retention.ms": "5000"}, replication_factor=2)
    state = cluster.controller.partition_state("kept", 0)
    cluster.controller.alter_partition("kept", 0, state.leader, state.leader_epoch, state.version, [state.leader])
    cluster.controller.allocate_producer_id()
    binding = AclBinding(
        ResourceType.TOPIC, "kept", PatternType.LITERAL, "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW
    )
    cluster.controller.create_acls([binding])
    credential = ScramCredential.from_password("SCRAM-SHA-256", "secret")
    cluster.controller.upsert_scram_credential("alice", credential)
    before = (cluster.controller.cluster_id(), cluster.controller.topics(), cluster.controller.acls())
    cluster.controller.close()

    cluster.controller = cluster.start_controller()
    assert (cluster.controller.cluster_id(), cluster.controller.topics(), cluster.controller.acls()) == before
    assert cluster.controller.scram_credential("alice", "SCRAM-SHA-256") == credential
    assert cluster.controller.allocate_producer_id() == 1
    # Brokers are not persisted: the restarted controller starts with those its host finds running.
    assert cluster.controller.brokers() == sorted(NODES)


def test_a_registering_broker_takes_the_place_of_a_gone_node_whose_disk_it_holds(tmp_path: Path) -> None:
    first = Cluster(tmp_path, MockClock())
    first.register("node-a")
    first.controller.create_topic("t", 2)
    first.close()
    # The cluster restarts and the disk of node-a comes back under a new node id.
    (tmp_path / "node-a").rename(tmp_path / "node-x")
    second = Cluster(tmp_path, MockClock())
    try:
        second.register("node-x")
        topic = second.controller.describe_topic("t")
        assert {topic.state(p).leader for p in topic.partitions} == {"node-x"}
    finally:
        second.close()


def metadata_batches(root: Path) -> list[tuple[int, int]]:
    """(records, bytes) of each batch of the metadata log of the controller over `root / "metadata"`, in order."""
    folder = root / "metadata" / partition_dir_name(METADATA_TOPIC, 0)
    return [
        (batch.last_offset - batch.base_offset + 1, batch.size_in_bytes)
        for segment in sorted(folder.glob("*.log"))
        for batch in iter_any_batches(segment.read_bytes())
    ]


def test_a_broker_taking_a_gone_nodes_place_rewrites_more_partitions_than_one_metadata_batch_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registering in the place of a gone node changes every partition its disk holds, one partition record each
    (~380 bytes): in a large cluster more than one batch of the metadata log's `max.message.bytes` holds (8 MiB,
    ~22,000 partitions; 64 KiB here, ~170). The change is written in as many batches, the mirror takes them all and
    stays in sync (each read sent to it in turn), and a restarted controller replays the new states."""
    limit = 64 * 1024
    monkeypatch.setattr(
        metadata_mirror, "METADATA_LOG_CONFIG", replace(metadata_mirror.METADATA_LOG_CONFIG, max_message_bytes=limit)
    )
    # The mirrors are sent reads of 1 MiB, smaller than such a change (~8 MiB at 22,000 partitions); here smaller
    # than this one too.
    monkeypatch.setattr(metadata_replication, "COPY_CHUNK_BYTES", limit // 2)
    first = Cluster(tmp_path, MockClock())
    first.register("node-a", "node-b")
    names = [f"t{index}" for index in range(6)]
    for name in names:
        first.controller.create_topic(name, 100, replication_factor=2)
    first.close()
    (tmp_path / "node-a").rename(tmp_path / "node-x")
    second = Cluster(tmp_path, MockClock())
    try:
        written_before = len(metadata_batches(tmp_path))
        second.register("node-b")
        second.start_node("node-x")
        second.controller.register_broker("node-x")
        written = metadata_batches(tmp_path)[written_before:]
        assert len(written) >= 2 and sum(records for records, _ in written) >= 600
        assert all(size <= limit for _, size in written)
        assert second.controller.metadata_quorum()["in_sync"] == ["node-b"]
        described = {name: second.controller.describe_topic(name) for name in names}
        for topic in described.values():
            assert all(sorted(topic.state(p).replicas) == ["node-b", "node-x"] for p in topic.partitions)
        second.controller.close()
        second.controller = second.start_controller()
        assert {name: second.controller.describe_topic(name) for name in names} == described
    finally:
        second.close()


# --- a simulation against Kafka's invariants -----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_random_losses_returns_and_isr_changes_keep_kafkas_invariants_through_the_controller(
    tmp_path: Path, seed: int
) -> None:
    """The assignment simulation's events, driven through the controller's own calls (the monitor's live set,
    registration, AlterPartition, the rebalance timer): every transition keeps Kafka's invariants, every running
    replica was told its partition's latest state, and a restarted controller replays exactly the last states.
    Self-healing is off: it changes assignments, which `test_self_healing` checks."""
    rng = random.Random(seed)
    simulated = Cluster(tmp_path, MockClock(), {"raybroker.balancer.node.loss.grace.ms": "-1"})
    try:
        nodes = [f"n{index}" for index in range(rng.randint(2, 5))]
        simulated.register(*nodes)
        running = set(nodes)
        partitions = rng.randint(1, 4)
        simulated.controller.create_topic("t", partitions, replication_factor=rng.randint(1, len(nodes)))
        for _ in range(40):
            before = {p: simulated.controller.partition_state("t", p) for p in range(partitions)}
            event = rng.choice(["lose", "return", "catch_up", "fall_behind", "rebalance"])
            if event == "lose" and running:
                running.discard(rng.choice(sorted(running)))
                simulated.controller.check_brokers(running)
            elif event == "return" and set(nodes) - running:
                back = rng.choice(sorted(set(nodes) - running))
                running.add(back)
                simulated.controller.register_broker(back)
            elif event == "rebalance":
                simulated.clock.sleep(REBALANCE_INTERVAL_S * 1000)
                simulated.controller.check_brokers(running)
            elif event in ("catch_up", "fall_behind"):
                for partition, state in before.items():
                    if state.offline:
                        continue
                    if event == "catch_up":
                        isr = set(state.isr) | {rng.choice([n for n in state.replicas if n in running])}
                    else:
                        isr = set(state.isr) - {rng.choice(state.isr)} | {state.leader}
                    simulated.controller.alter_partition(
                        "t", partition, state.leader, state.leader_epoch, state.version, sorted(isr)
                    )
            for partition, old in before.items():
                new = simulated.controller.partition_state("t", partition)
                if new != old:
                    check_transition(old, new, dict.fromkeys(running, object()))
                    for node in new.replicas:
                        if node in running:
                            assert simulated.replicas.latest(node, "t", partition) == new
        last = simulated.controller.topics()
        simulated.controller.close()
        simulated.controller = simulated.start_controller()
        assert simulated.controller.topics() == last
    finally:
        simulated.close()
