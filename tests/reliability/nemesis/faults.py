"""The nemesis's faults: each hurts one worker host chosen by its role in the cluster now, waits, heals, and brings
the host back as a machine back with its disks would come back, writing what it did into the history.

- `pause_node`: every process SIGSTOPped until Ray declares the node dead, held `hold_s` more, then SIGCONTed: its
  raylet exits, its workers with it, after acting for a moment on what they knew; the host starts again;
- `pause_broker`: the broker's processes SIGSTOPped (the raylet runs, so Ray keeps the node) for `hold_s`, longer
  than `broker.session.timeout.ms`, then SIGCONTed: fenced by its missing heartbeats, it must register again and
  catch up;
- `cut_from_head`: packets to and from the head dropped until Ray declares the node dead and `hold_s` more: its
  processes run on, cut from the GCS and the controller, as a zombie; healed, the raylet learns it and exits, and
  the host starts again;
- `cut_from_peer`: packets between it and the other worker host dropped for `hold_s`: both stay in the cluster, their
  replication between them stops;
- `kill_node`: every process SIGKILLed; the host starts again.

Roles: `leader` (a worker leading a partition of the data topics), `follower` (a worker leading none, if one is),
`coordinator` (the transaction coordinator's node, if on a worker), `any`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import ray

from actors.calls import call
from actors.clients.broker import Broker
from storage.errors import RaybrokerError
from tests.reliability.nemesis.history import History
from tests.reliability.nemesis.hosts import Host, Hosts

FAULTS = ("pause_node", "pause_broker", "cut_from_head", "cut_from_peer", "kill_node")
ROLES = ("leader", "follower", "coordinator", "any")


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule: its kind (`FAULTS`), the role of its target (`ROLES`) and how long it holds."""

    kind: str
    role: str
    hold_s: float


def _leaders(topics: list[str]) -> set[str]:
    leaders = set()
    for topic in topics:
        metadata = Broker.connect().topic(topic)
        leaders.update(metadata.state(p).leader for p in metadata.partitions)
    return leaders


def _coordinator_node() -> str | None:
    from actors.calls import get_actor
    from actors.options import transaction_coordinator_name

    try:
        handle = get_actor(transaction_coordinator_name())
        return str(call(handle.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()), timeout_s=10))
    except RaybrokerError:
        return None


def target(hosts: Hosts, role: str, topics: list[str], rng: random.Random) -> Host:
    """The worker host a fault of `role` hits now (any running worker when none fits the role)."""
    running = [host for host in hosts.workers if hosts.alive(host.node)]
    assert running, "no worker host runs"
    leaders = _leaders(topics)
    fitting: list[Host] = []
    if role == "leader":
        fitting = [host for host in running if host.node in leaders]
    elif role == "follower":
        fitting = [host for host in running if host.node not in leaders]
    elif role == "coordinator":
        node = _coordinator_node()
        fitting = [host for host in running if host.node == node]
    return rng.choice(fitting or running)


def inject(hosts: Hosts, history: History, fault: Fault, topics: list[str], rng: random.Random) -> None:
    """Runs one fault on the host its role picks, and brings the host back."""
    host = target(hosts, fault.role, topics, rng)
    detail = f"host {host.index} node {(host.node or '')[:8]} ({fault.role})"
    history.add("nemesis", "fault", action=f"{fault.kind} start", target=host.index, detail=detail)
    ACTIONS[fault.kind](hosts, host, fault.hold_s)
    history.add(
        "nemesis", "fault", action=f"{fault.kind} end", target=host.index, detail=f"node {(host.node or '')[:8]}"
    )


def _pause_node(hosts: Hosts, host: Host, hold_s: float) -> None:
    hosts.pause(host)
    try:
        hosts.wait_dead(host)
        time.sleep(hold_s)
    finally:
        hosts.resume(host)
    _back(hosts, host)


def _pause_broker(hosts: Hosts, host: Host, hold_s: float) -> None:
    hosts.pause_broker(host)
    try:
        time.sleep(hold_s)
    finally:
        hosts.resume(host)


def _cut_from_head(hosts: Hosts, host: Host, hold_s: float) -> None:
    hosts.network.cut(host.index, hosts.network.head_address)
    try:
        hosts.wait_dead(host)
        time.sleep(hold_s)
    finally:
        hosts.network.heal(host.index)
    _back(hosts, host)


def _cut_from_peer(hosts: Hosts, host: Host, hold_s: float) -> None:
    peers = [other for other in hosts.workers if other is not host]
    for peer in peers:
        hosts.network.cut(host.index, hosts.network.address(peer.index))
    try:
        time.sleep(hold_s)
    finally:
        hosts.network.heal(host.index)


def _kill_node(hosts: Hosts, host: Host, hold_s: float) -> None:
    hosts.kill(host)
    hosts.wait_dead(host)
    time.sleep(hold_s)
    _back(hosts, host)


def _back(hosts: Hosts, host: Host) -> None:
    """Waits for what is left of a node Ray declared dead to exit (its raylet learns it at once once it can), then
    starts the host again (`Hosts.restart` kills whatever still runs there)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_is_raylet(pid) for pid in hosts.network.pids(host.index)):
        time.sleep(0.2)
    hosts.restart(host)


def _is_raylet(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip() == "raylet"
    except OSError:
        return False


ACTIONS: dict[str, Callable[[Hosts, Host, float], None]] = {
    "pause_node": _pause_node,
    "pause_broker": _pause_broker,
    "cut_from_head": _cut_from_head,
    "cut_from_peer": _cut_from_peer,
    "kill_node": _kill_node,
}


def random_schedule(rng: random.Random, count: int, hold_s: tuple[float, float]) -> list[Fault]:
    """`count` faults of random kinds and roles, each held a random time within `hold_s`."""
    return [Fault(rng.choice(FAULTS), rng.choice(ROLES), rng.uniform(*hold_s)) for _ in range(count)]
