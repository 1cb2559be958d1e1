"""`raybroker drain` and `raybroker balance` against a real one-broker cluster: no partition can move there (no other
broker is free to take a replica), so the drain, dry run or only moving replicas, exits 1 with the controller's
reason in one line and moves nothing, a drain that would let the controller's node go refuses first, an unknown
broker is one line too, and a balance finds nothing to move. The moves themselves are the controller's
(`test_self_healing`, `test_balancing`), and a drain that lets a worker node go is `test_zz_replication`'s: moving
a replica needs a second node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import ray

from actors.clients.admin import Admin
from cluster.cli.main import EXIT_DATA_ERROR, EXIT_OK
from tests.cluster.cli.cli_support import one_error_line, run

pytestmark = pytest.mark.ray


def test_a_drain_that_cannot_move_a_partition_exits_1_and_moves_nothing_and_balance_moves_nothing(
    start_test_broker: Callable[..., tuple[Any, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    broker, _ = start_test_broker(log_dirs_count=1)
    Admin(broker).create_topic("drain-t", 2)
    node = ray.get_runtime_context().get_node_id()
    for only_moves in (["--dry-run"], ["--keep-broker"]):
        code, out, err = run(capsys, "drain", "--broker", node, *only_moves)
        assert (code, out) == (EXIT_DATA_ERROR, "")
        assert "cannot move: no running broker is free to take its replica" in one_error_line(err)
    # The one node runs the controller: it cannot go, so a drain that would let it go refuses before any move.
    code, out, err = run(capsys, "drain", "--broker", node)
    assert (code, out) == (EXIT_DATA_ERROR, "")
    assert one_error_line(err) == (
        f"raybroker: error: node {node} runs the controller, whose metadata log is on its disk: the node cannot be "
        "removed (--keep-broker only moves its replicas)\n"
    )
    assert Admin(broker).list_partition_reassignments() == []
    assert all(broker.topic("drain-t").state(p).replicas == (node,) for p in (0, 1))

    code, out, err = run(capsys, "drain", "--broker", "7")
    assert code == EXIT_DATA_ERROR
    assert one_error_line(err) == (
        "raybroker: error: no running broker has node.id or Ray node id '7' (raybroker status lists them)\n"
    )

    # One broker holds every replica: balanced already.
    assert run(capsys, "balance", "--dry-run") == (EXIT_OK, "Balancing would move 0 replicas:\n", "")
    assert run(capsys, "balance") == (EXIT_OK, "Balancing moves 0 replicas:\n", "")
