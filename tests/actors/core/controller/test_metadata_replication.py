"""The metadata log's copies on other brokers, through the plain controller over real log managers (the test
cluster of `test_controller`): every write reaches `metadata.replication.factor` - 1 mirrors byte for byte, a
controller on an empty disk takes the newest copy and finds every topic, id, config, ACL and SCRAM credential again,
a controller left running beside its successor is fenced, a copy that parted from the log is cut where it
parted and caught up, and a mirror whose broker stands still holds up one write by its timeout, no more. The
oracle is the controller's own log, read from its folder once it is closed."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.core.controller import metadata_replication
from actors.core.controller.controller import Controller
from actors.core.security.acl_bindings import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from actors.core.security.scram import ScramCredential
from storage.clock import MockClock
from storage.errors import NotControllerError, RequestTimedOutError
from storage.logdir.metadata_mirror import open_metadata_log
from tests.actors.core.controller.test_controller import NODES, Cluster

BINDING = AclBinding(
    ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW
)


def copy_bytes(cluster: Cluster, node: str) -> bytes:
    return cluster.managers[node].metadata_mirror().read(0, 1 << 30)


def controller_log_bytes(cluster: Cluster) -> bytes:
    """The closed controller's metadata log, read from its folder."""
    log = open_metadata_log(cluster.root / "metadata", cluster.clock)
    try:
        return bytes(log.read(0, 1 << 30).records)
    finally:
        log.close()


def populate(controller: Controller) -> ScramCredential:
    controller.create_topic("orders", 2, {"retention.ms": "5000"}, replication_factor=2)
    controller.create_topic("audit", 1, {"cleanup.policy": "compact"})
    controller.create_acls([BINDING])
    credential = ScramCredential.from_password("SCRAM-SHA-256", "secret")
    controller.upsert_scram_credential("alice", credential)
    controller.allocate_producer_id()
    return credential


def snapshot(controller: Controller) -> tuple[object, ...]:
    return (controller.cluster_id(), controller.topics(), controller.acls()[1], controller.scram_credentials())


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    started = Cluster(tmp_path, MockClock())
    started.register(*NODES)
    yield started
    started.close()


def test_every_write_reaches_two_mirrors_byte_for_byte_and_no_third(cluster: Cluster) -> None:
    populate(cluster.controller)
    quorum = cluster.controller.metadata_quorum()
    assert quorum["mirrors"] == ["node-a", "node-b"] and quorum["in_sync"] == ["node-a", "node-b"]
    mirrored = {node: copy_bytes(cluster, node) for node in ("node-a", "node-b")}
    assert cluster.managers["node-c"].metadata_mirror().state().end_offset == 0
    cluster.controller.close()
    assert mirrored == dict.fromkeys(mirrored, controller_log_bytes(cluster))


def test_a_controller_on_an_empty_disk_takes_the_newest_copy_and_finds_everything(cluster: Cluster) -> None:
    credential = populate(cluster.controller)
    before = snapshot(cluster.controller)
    epoch = cluster.controller.metadata_quorum()["epoch"]
    cluster.controller.close()
    shutil.rmtree(cluster.root / "metadata")

    cluster.controller = cluster.start_controller()
    assert snapshot(cluster.controller) == before
    assert cluster.controller.scram_credential("alice", "SCRAM-SHA-256") == credential
    assert cluster.controller.allocate_producer_id() == 1, "the producer-id block is not handed out again"
    assert cluster.controller.metadata_quorum()["epoch"] == epoch + 1
    cluster.controller.create_topic("after", 1)
    cluster.controller.close()
    assert copy_bytes(cluster, "node-a") == copy_bytes(cluster, "node-b") == controller_log_bytes(cluster)


def test_a_controller_running_beside_its_successor_is_fenced(cluster: Cluster) -> None:
    cluster.controller.create_topic("orders", 1)
    stale = cluster.controller
    successor = cluster.start_controller(metadata_dir="successor")
    assert successor.list_topics() == ["orders"], "the successor took the copies' metadata"
    mirrored = copy_bytes(cluster, "node-a")
    with pytest.raises(NotControllerError):
        stale.create_topic("from-the-stale-one", 1)
    with pytest.raises(NotControllerError):
        stale.allocate_producer_id()
    assert stale.check_brokers(set()) == [], "a fenced controller elects nobody"
    assert "from-the-stale-one" not in stale.list_topics()
    assert copy_bytes(cluster, "node-a") == copy_bytes(cluster, "node-b") == mirrored
    successor.create_topic("from-the-successor", 1)
    assert successor.list_topics() == ["from-the-successor", "orders"]
    successor.close()
    stale.close()
    cluster.controller = cluster.start_controller()


def test_a_copy_that_parted_from_the_log_is_cut_where_it_parted_and_caught_up(cluster: Cluster) -> None:
    cluster.controller.create_topic("orders", 1)
    epoch = int(cluster.controller.metadata_quorum()["epoch"])
    end = cluster.managers["node-b"].metadata_mirror().state().end_offset
    cluster.controller.create_topic("lost-with-the-disk", 1)
    # node-b's copy missed the last writes (its broker did not answer them); then the controller's disk is lost.
    cluster.managers["node-b"].metadata_mirror().truncate_to(epoch, end)
    cluster.controller.close()
    shutil.rmtree(cluster.root / "metadata")

    # The next controller starts while node-a's broker is away: it takes node-b's copy and writes over that offset.
    cluster.controller = cluster.start_controller(("node-b", "node-c"))
    assert cluster.controller.list_topics() == ["orders"]
    cluster.controller.create_topic("written-after", 1)
    assert b"lost-with-the-disk" in copy_bytes(cluster, "node-a")
    # node-a comes back and takes node-c's place among the mirrors: its copy is cut and caught up.
    cluster.controller.register_broker("node-a")
    cluster.controller.broker_lost("node-c")
    cluster.controller.sync_metadata_mirrors()
    assert cluster.controller.metadata_quorum()["in_sync"] == ["node-a", "node-b"]
    cluster.controller.close()
    expected = controller_log_bytes(cluster)
    assert copy_bytes(cluster, "node-a") == copy_bytes(cluster, "node-b") == expected
    assert b"lost-with-the-disk" not in expected
    cluster.controller = cluster.start_controller()
    assert cluster.controller.list_topics() == ["orders", "written-after"]


class Unanswered:
    """A call to a broker that stands still: unanswered until its timeout, as a Ray call to a paused actor is."""

    def result(self, timeout: float | None = None) -> Any:
        time.sleep(timeout or 0)
        raise RequestTimedOutError("no answer")


class Pausable:
    """A broker's link that stands still while `paused` is set."""

    def __init__(self, link: Any, paused: threading.Event) -> None:
        self._link = link
        self._paused = paused

    def __getattr__(self, name: str) -> Callable[..., Any]:
        send = getattr(self._link, name)
        return lambda *args: Unanswered() if self._paused.is_set() else send(*args)


def test_a_mirror_whose_broker_stands_still_holds_up_one_write_and_is_caught_up_once_it_answers(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeout_s = 0.5
    monkeypatch.setattr(metadata_replication, "MIRROR_TIMEOUT_S", timeout_s)
    paused = threading.Event()
    find = cluster.find_broker
    monkeypatch.setattr(
        cluster, "find_broker", lambda node: Pausable(find(node), paused) if node == "node-b" else find(node)
    )
    cluster.controller.close()
    cluster.controller = cluster.start_controller()
    controller = cluster.controller
    controller.allocate_producer_id()
    assert controller.metadata_quorum()["in_sync"] == ["node-a", "node-b"]

    paused.set()
    started = time.monotonic()
    controller.allocate_producer_id()
    assert time.monotonic() - started >= timeout_s
    assert controller.metadata_quorum()["in_sync"] == ["node-a"]
    # Its catch-up is due again: it is left to the mirrors' own upkeep pass, never a write or the monitor's pass.
    cluster.clock.sleep(metadata_replication.MIRROR_RETRY_MS)
    started = time.monotonic()
    for _ in range(5):
        controller.allocate_producer_id()
    controller.check_brokers(set(NODES))
    assert time.monotonic() - started < timeout_s, "a write or monitor pass waited on the mirror out of sync"
    controller.sync_metadata_mirrors()
    assert controller.metadata_quorum()["in_sync"] == ["node-a"]

    paused.clear()
    controller.sync_metadata_mirrors()
    assert controller.metadata_quorum()["in_sync"] == ["node-a"], "caught up before its retry is due"
    cluster.clock.sleep(metadata_replication.MIRROR_RETRY_MS)
    controller.sync_metadata_mirrors()
    assert controller.metadata_quorum()["in_sync"] == ["node-a", "node-b"]
    controller.allocate_producer_id()
    controller.close()
    assert copy_bytes(cluster, "node-a") == copy_bytes(cluster, "node-b") == controller_log_bytes(cluster)
    cluster.controller = cluster.start_controller()


def test_a_stale_controller_cut_off_from_every_copy_tells_replicas_its_older_epoch(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller whose copies all stand still writes on alone, so nothing fences it through them: its states
    reach the replicas stamped with its own epoch, below its successor's, which every replica that heard from the
    successor refuses (`Replica.update`)."""
    monkeypatch.setattr(metadata_replication, "MIRROR_TIMEOUT_S", 0.2)
    paused = threading.Event()
    find = cluster.find_broker
    monkeypatch.setattr(cluster, "find_broker", lambda node: Pausable(find(node), paused))
    cluster.controller.close()
    stale = cluster.controller = cluster.start_controller()
    stale.create_topic("orders", 1, replication_factor=3)
    stale_epoch = int(stale.metadata_quorum()["epoch"])
    assert {state.controller_epoch for _, state in cluster.replicas.told} == {stale_epoch}

    monkeypatch.setattr(cluster, "find_broker", find)
    successor = cluster.start_controller(metadata_dir="successor")
    successor_epoch = int(successor.metadata_quorum()["epoch"])
    assert successor_epoch > stale_epoch
    assert successor.partition_state("orders", 0).controller_epoch == successor_epoch
    leader = successor.partition_state("orders", 0).leader
    told = len(cluster.replicas.told)
    successor.broker_lost(leader)
    assert {state.controller_epoch for _, state in cluster.replicas.told[told:]} == {successor_epoch}

    paused.set()
    told = len(cluster.replicas.told)
    stale.broker_lost(successor.partition_state("orders", 0).leader)
    assert stale.metadata_quorum()["in_sync"] == [], "its copies stood still: it wrote alone"
    pushed = cluster.replicas.told[told:]
    assert pushed and {state.controller_epoch for _, state in pushed} == {stale_epoch}
    successor.close()
    paused.clear()
