"""A replica learns its replication state from the controller even when its first question goes unanswered.

The controller tells a partition's replicas their state when it changes it (an election, a follower added), not when
the partition opens: a new or reopened replica asks for it. Its one question used to be all it asked, so a replica that
opened while the controller could not answer (restarting, or busy past the call's timeout creating 5,000 partitions)
never learned that it leads, and every append to it failed. On a real local Ray: the replica of a partition opens
while the broker is stopped, then the broker starts again over its log dirs; the oracle is the controller's own state
of the partition."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.calls import call
from actors.clients.broker import stop_broker
from actors.server.partition_log import PartitionLogActor
from actors.server.partition_lookup import replica_actor
from tests.actors.support import wait_for

pytestmark = pytest.mark.ray


def test_a_replica_whose_first_question_failed_asks_again_until_the_controller_answers(
    start_test_broker: Callable[..., tuple[Any, list[Path]]], tmp_path: Path
) -> None:
    client, log_dirs = start_test_broker(log_dirs_count=1)
    call(client.controller.create_topic.remote("learning", 1))
    stop_broker()
    replica = PartitionLogActor(str(tmp_path / "learning-0"), {}, find_replica=replica_actor)
    try:
        assert replica.replication_state() is None  # type: ignore[operator]
        client, _ = start_test_broker(log_dirs=log_dirs)
        wait_for(lambda: replica.replication_state() is not None, timeout_s=60, what="the replica to learn its state")  # type: ignore[operator]
        learned = replica.replication_state()  # type: ignore[operator]
        expected = call(client.controller.describe_topic.remote("learning")).state(0)
        assert (learned.topic, learned.partition, learned.leader, learned.leader_epoch) == (
            "learning",
            0,
            expected.leader,
            expected.leader_epoch,
        )
    finally:
        replica.close()


def test_replicas_of_a_process_learn_their_states_from_a_controller_that_replaced_the_one_they_asked(
    start_test_broker: Callable[..., tuple[Any, list[Path]]], tmp_path: Path
) -> None:
    """The replicas of one process share the controller's handle (a host opens thousands); once the controller they
    asked is gone for good and another runs under its name, a replica's failed question makes the next one look the
    new controller up."""
    client, log_dirs = start_test_broker(log_dirs_count=1)
    call(client.controller.create_topic.remote("first", 1))
    call(client.controller.create_topic.remote("second", 1))
    stop_broker()
    replicas = []
    try:
        first = PartitionLogActor(str(tmp_path / "first-0"), {}, find_replica=replica_actor)
        replicas.append(first)
        client, log_dirs = start_test_broker(log_dirs=log_dirs)
        wait_for(lambda: first.replication_state() is not None, timeout_s=60, what="the first replica's state")  # type: ignore[operator]
        stop_broker()
        client, _ = start_test_broker(log_dirs=log_dirs)
        second = PartitionLogActor(str(tmp_path / "second-0"), {}, find_replica=replica_actor)
        replicas.append(second)
        wait_for(lambda: second.replication_state() is not None, timeout_s=60, what="the second replica's state")  # type: ignore[operator]
        expected = call(client.controller.describe_topic.remote("second")).state(0)
        learned = second.replication_state()  # type: ignore[operator]
        assert (learned.leader, learned.leader_epoch) == (expected.leader, expected.leader_epoch)
    finally:
        for replica in replicas:
            replica.close()
