"""Helpers the actor tests share: the wall clock in Kafka's milliseconds, waiting for a condition, this node's
log-manager actor, and the connections to a process's append channel."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray

from actors.calls import get_actor
from actors.options import log_manager_name


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    """Polls `predicate` every 0.1 s; fails the test after `timeout_s` (Ray restarts on 2 cores take seconds)."""
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
