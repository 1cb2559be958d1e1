"""`LeaderAndIsr`, the partition state the controller decides and pushes: its JSON form in the metadata log (a
body from before `version` existed reads as version 0; a balancer's move is marked while it lasts), the versions
and leader epochs each change raises, and the under-replicated / offline flags `kafka-topics --describe` filters
on."""

from __future__ import annotations

import json

from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr

STATE = LeaderAndIsr("orders", 2, "b", 4, ("a", "b", "c"), ("b", "c"), 7)


def test_to_json_then_from_json_gives_the_same_state():
    body = json.loads(json.dumps(STATE.to_json()))
    assert LeaderAndIsr.from_json("orders", 2, body) == STATE


def test_to_json_uses_the_metadata_log_field_names():
    assert STATE.to_json() == {
        "leader": "b",
        "epoch": 4,
        "replicas": ["a", "b", "c"],
        "isr": ["b", "c"],
        "version": 7,
        "directories": [],
    }


def test_from_json_without_version_reads_version_zero():
    body = {"leader": "a", "epoch": 3, "replicas": ["a", "b"], "isr": ["a"]}
    assert LeaderAndIsr.from_json("t", 0, body) == LeaderAndIsr("t", 0, "a", 3, ("a", "b"), ("a",), 0)


def test_offline_state_round_trips_with_no_leader():
    offline = LeaderAndIsr("t", 1, NO_LEADER, 9, ("a", "b"), ("a",), 3)
    assert LeaderAndIsr.from_json("t", 1, json.loads(json.dumps(offline.to_json()))) == offline


def test_a_balancers_move_round_trips_and_ends_with_its_reassignment():
    moving = LeaderAndIsr("t", 0, "a", 2, ("c", "a"), ("a",), 5, adding=("c",), removing=("a",), balancer=True)
    body = json.loads(json.dumps(moving.to_json()))
    assert body["balancer"] is True
    assert LeaderAndIsr.from_json("t", 0, body) == moving
    done = moving.with_assignment(("c",), ("c",), (), ())
    assert not done.balancer and "balancer" not in done.to_json()


def test_with_isr_raises_the_version_not_the_leader_epoch():
    shrunk = STATE.with_isr(("b",))
    assert (shrunk.isr, shrunk.version, shrunk.leader_epoch, shrunk.leader) == (("b",), 8, 4, "b")
    assert shrunk.replicas == STATE.replicas


def test_with_leader_raises_both_the_leader_epoch_and_the_version():
    elected = STATE.with_leader("c", ("c",))
    assert (elected.leader, elected.isr, elected.leader_epoch, elected.version) == ("c", ("c",), 5, 8)


def test_with_leader_to_none_still_opens_a_new_epoch():
    offline = STATE.with_leader(NO_LEADER, ("b",))
    assert offline.offline
    assert (offline.leader_epoch, offline.version) == (5, 8)


def test_with_replica_moved_renames_the_node_in_every_place_and_raises_the_version():
    moved = STATE.with_replica_moved("c", "d")
    assert moved.replicas == ("a", "b", "d")
    assert moved.isr == ("b", "d")
    assert moved.leader == "b"
    assert (moved.leader_epoch, moved.version) == (4, 8)


def test_with_replica_moved_renames_the_leader_too():
    moved = STATE.with_replica_moved("b", "e")
    assert (moved.leader, moved.replicas, moved.isr) == ("e", ("a", "e", "c"), ("e", "c"))


def test_with_replica_moved_of_a_replica_outside_the_isr_leaves_the_isr():
    moved = STATE.with_replica_moved("a", "x")
    assert (moved.replicas, moved.isr) == (("x", "b", "c"), ("b", "c"))


def test_changes_leave_the_original_unchanged():
    copy = LeaderAndIsr.from_json("orders", 2, STATE.to_json())
    STATE.with_isr(("b",))
    STATE.with_leader("c", ("c",))
    STATE.with_replica_moved("c", "d")
    assert copy == STATE


def test_under_replicated_when_fewer_in_sync_than_assigned():
    assert STATE.under_replicated
    assert not STATE.with_isr(("a", "b", "c")).under_replicated


def test_offline_only_without_a_leader():
    assert not STATE.offline
    assert STATE.with_leader(NO_LEADER, ("b",)).offline


def test_replication_factor_is_the_number_of_replicas():
    assert STATE.replication_factor == 3
    assert LeaderAndIsr("t", 0, "a", 0, ("a",), ("a",)).replication_factor == 1
