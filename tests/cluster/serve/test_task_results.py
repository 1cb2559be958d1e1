"""A Serve task queue's outcomes (`cluster.serve.task_results`) on a real broker: an outcome one `TaskResults`
records is what another one's `outcome` answers next (it reads the topic up to the end its partition's leader
gives; an ended task's outcome, SUCCESS or FAILURE, is answered from what it read), and still is after the process
holding that leader (its partition host, or its own actor) was killed and restarted under the reader's kept
handle."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import ray

from actors.server.partition_lookup import HostedPartitionHandle, partition_actor
from cluster.serve.task_messages import FAILURE, REVOKED, SUCCESS, Outcome
from cluster.serve.task_results import TaskResults
from storage.errors import BrokerNotAvailableError

pytestmark = pytest.mark.ray

RESTART_DEADLINE_S = 60.0


def _once_back(call: Callable[[], Any]) -> Any:
    """`call()`, retried while the results partition's leader restarts (it raises `BrokerNotAvailableError`, a
    retriable error, meanwhile)."""
    deadline = time.monotonic() + RESTART_DEADLINE_S
    while True:
        try:
            return call()
        except BrokerNotAvailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_recorded_outcome_is_seen_by_another_reader_also_after_its_leader_restarted(
    start_test_broker: Callable[..., tuple[Any, Any]],
) -> None:
    broker, _ = start_test_broker()
    topic = f"results-{uuid.uuid4().hex[:8]}"
    writer = TaskResults(broker, topic, 1)
    reader = TaskResults(broker, topic, 1)
    try:
        assert reader.outcome("t1") is None
        writer.record("t1", Outcome(REVOKED, finished_at=1.0))
        assert reader.outcome("t1") == Outcome(REVOKED, finished_at=1.0)
        writer.record("t1", Outcome(FAILURE, error="late", finished_at=2.0))
        assert reader.outcome("t1") == Outcome(FAILURE, error="late", finished_at=2.0)
        # An ended outcome is answered from what was read: nothing the task processor writes follows it.
        writer.record("t1", Outcome(SUCCESS, 2, finished_at=2.5))
        assert reader.outcome("t1") == Outcome(FAILURE, error="late", finished_at=2.0)
        leader = partition_actor(topic, 0)
        ray.kill(leader.host if isinstance(leader, HostedPartitionHandle) else leader, no_restart=False)
        _once_back(lambda: writer.record("t2", Outcome(SUCCESS, [3], finished_at=3.0)))
        assert _once_back(lambda: reader.outcome("t2")) == Outcome(SUCCESS, [3], finished_at=3.0)
        assert reader.known("t1") == Outcome(SUCCESS, 2, finished_at=2.5)
    finally:
        writer.close()
        reader.close()
