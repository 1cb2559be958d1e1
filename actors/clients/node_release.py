"""Letting a drained broker's node go: the last step of `raybroker drain`.

A drain (`Controller.drain_broker`) moves every replica off a broker, but the broker's processes stay on its node:
the log manager, its partition hosts and cleaners, the Kafka listeners, perhaps the transaction coordinator. Ray
would keep the node for them, and still place new work there. `release_node(node)` stops them and tells Ray the
node may go, as Ray's autoscaler itself does before it terminates a node:

- it refuses (`InvalidRequestError`, nothing stopped) while the broker still holds a replica, or when the node runs
  the controller (its metadata log lives on that node's disk; on the head) or the group coordinator (the committed
  offsets' cache every group's client asks, started once on the first broker's node);
- it stops the node's Kafka listeners (their clients find the other brokers through Metadata), the transaction
  coordinator if it runs there (the controller's monitor starts it again beside `__transaction_state`'s partition 0
  leader, where it loads every transaction's state), then the log manager cleanly (the node's partition hosts and
  cleaners with it), and unregisters the broker: it is neither placed on nor elected any more;
- it asks Ray's GCS to drain the node (`DrainNode` with reason idle termination, the request Ray's autoscaler v2
  sends and `ray drain-node` makes): Ray schedules no new task or actor there, and the node, idle, leaves the
  cluster (its raylet exits; the autoscaler terminates its machine). Ray refuses while other work still runs on the
  node (for a few seconds too, until the stopped processes are gone); its last answer is returned. Ray exposes this
  request through its GCS client only (the `ray drain-node` command is hidden, not a stable API).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import ray

from actors.calls import actor_node, call, controller, get_actor
from actors.clients.broker import stop_kafka_listeners, stop_node_broker, stop_transaction_coordinator
from actors.options import group_coordinator_name, log_manager_name, transaction_coordinator_name
from storage.errors import BrokerNotAvailableError, InvalidRequestError

# Ray takes a node for idle only once the processes stopped on it have exited and its raylet has reported so: the
# drain is asked again every `RAY_DRAIN_RETRY_S` for up to `RAY_DRAIN_WAIT_S` while Ray answers it is not idle.
RAY_DRAIN_WAIT_S = 30.0
RAY_DRAIN_RETRY_S = 0.5
# Why Ray is asked to drain the node, as `ray list nodes` and the autoscaler's logs show it.
DRAIN_REASON_MESSAGE = "raybroker drain: the node's broker holds no replica and has stopped"


@dataclass(frozen=True, slots=True)
class NodeRelease:
    """What `release_node` did: whether Ray took the node's drain, and Ray's reason when it did not."""

    node: str
    ray_accepted: bool
    ray_refusal: str


def release_node(node: str) -> NodeRelease:
    """Stops the drained broker on Ray node `node` and asks Ray to drain the node (see the module docstring)."""
    ctrl: Any = controller()
    if node not in call(ctrl.brokers.remote()):
        raise InvalidRequestError(f"no broker is registered on node {node}")
    _check_releasable(ctrl, node)
    stop_kafka_listeners(node)
    with contextlib.suppress(BrokerNotAvailableError):
        transactions = get_actor(transaction_coordinator_name())
        if actor_node(transactions) == node:
            stop_transaction_coordinator(transactions)
    stop_node_broker(ctrl, node, get_actor(log_manager_name(node)))
    accepted, refusal = _drain_ray_node(node)
    return NodeRelease(node, accepted, refusal)


def _check_releasable(ctrl: Any, node: str) -> None:
    """`InvalidRequestError` when the broker on `node` may not stop: it holds a replica, or `kept_by` says why."""
    holding = [
        f"{state.topic}-{state.partition}"
        for state in call(ctrl.partition_states.remote())
        if node in state.replicas or node in state.adding
    ]
    if holding:
        shown = ", ".join(sorted(holding)[:5])
        raise InvalidRequestError(f"the broker on node {node} still holds {len(holding)} replicas ({shown}): drain it")
    reason = kept_by(node)
    if reason is not None:
        raise InvalidRequestError(reason)


def kept_by(node: str) -> str | None:
    """Why Ray node `node` cannot be let go whatever moves off it (it runs the controller or the group
    coordinator), None when nothing keeps it: a drain asks this before it moves anything."""
    if actor_node(controller()) == node:
        return f"node {node} runs the controller, whose metadata log is on its disk: the node cannot be removed"
    with contextlib.suppress(BrokerNotAvailableError):
        if actor_node(get_actor(group_coordinator_name())) == node:
            return (
                f"node {node} runs the group coordinator (started on the cluster's first broker): "
                "the node cannot be removed"
            )
    return None


def _drain_ray_node(node: str) -> tuple[bool, str]:
    """Asks Ray's GCS to drain `node` for idle termination, with no deadline: (accepted, Ray's refusal)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # Ray's stubs omit its Cython client
    from ray.core.generated.autoscaler_pb2 import (  # type: ignore[attr-defined]  # generated, unstubbed
        DRAIN_NODE_REASON_IDLE_TERMINATION,
    )

    gcs = GcsClient(address=ray.get_runtime_context().gcs_address)
    deadline = time.monotonic() + RAY_DRAIN_WAIT_S
    while True:
        accepted, refusal = gcs.drain_node(node, DRAIN_NODE_REASON_IDLE_TERMINATION, DRAIN_REASON_MESSAGE, 0)
        if accepted or time.monotonic() >= deadline:
            return bool(accepted), str(refusal)
        time.sleep(RAY_DRAIN_RETRY_S)
