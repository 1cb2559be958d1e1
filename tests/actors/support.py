"""Helpers the actor tests share: the wall clock in Kafka's milliseconds, waiting for a condition, this node's
log-manager actor, the connections to a process's append channel, a broker started on a chosen node of a
multi-node cluster, and the session's Ray let go by a module that runs a cluster of its own."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.calls import get_actor
from actors.clients.broker import stop_broker
from actors.options import log_manager_name
from storage.errors import BrokerNotAvailableError


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    """Polls `predicate` every 0.1 s; fails the test after `timeout_s` (a Ray restart takes seconds)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def manager() -> Any:
    """The log-manager actor of the node this test runs on."""
    return get_actor(log_manager_name(ray.get_runtime_context().get_node_id()))


def append_channel_connections(pid: int) -> int:
    """Connected sockets of the append channel of process `pid` (Linux lists abstract Unix sockets, "@name", in
    /proc/net/unix; an accepted connection carries the listener's name, state 03 = connected)."""
    prefix = f"@raybroker-append-{pid}-"
    with open("/proc/net/unix") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if len(row) >= 8 and row[7].startswith(prefix) and row[5] == "03")


@ray.remote(num_cpus=0)
def _start_broker_here(properties: dict[str, str]) -> str:
    from actors.clients.broker import start_broker

    return start_broker(properties)


def start_broker_on(node: str, properties: dict[str, str]) -> None:
    """Starts the broker of Ray node `node` with `properties` (`start_broker` in a task pinned there, as `raybroker
    start` runs on each node of a cluster)."""
    pinned = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
    assert ray.get(_start_broker_here.options(scheduling_strategy=pinned).remote(properties)) == node


def release_session_ray() -> None:
    """Stops the session's broker and disconnects from its Ray, if this process is connected: a module with
    `OWNS_RAY = True` (run after every other) starts a cluster of its own, on a machine the session's cluster no
    longer loads."""
    if ray.is_initialized():
        with contextlib.suppress(BrokerNotAvailableError):
            stop_broker()
        ray.shutdown()
