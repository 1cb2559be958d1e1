"""`raybroker drain`: moves every replica off one broker before its node is removed (Cruise Control's
remove_broker; with Kafka's own tools an operator writes a kafka-reassign-partitions plan for it by hand).

`--broker ID` names the broker by its Kafka `node.id` (as `raybroker status` lists it) or by its Ray node id. The
controller plans the moves (`Controller.drain_broker`: each replica goes to the running broker that holds no
replica of the partition and the fewest replicas of all) and refuses, moving nothing, when a partition cannot move
(no broker is free to take its replica, it has no leader, or it is being moved already). `--dry-run` prints the plan
only. Otherwise the command prints the plan, starts the moves (Kafka's reassignments: the new replicas copy from
the leaders and join the ISRs, then the drained ones are deleted) and waits until no partition has a replica on the
broker any more, printing its progress; the broker takes no new replica meanwhile. Then the node can go: `ray stop`
on it, or the autoscaler's scale-down.

Exit codes: 0 drained (with `--dry-run`: the plan printed), 1 no such broker, a partition that cannot move, or
`--timeout` reached with moves still under way (they go on), 2 usage error, 130 interrupted (the moves go on).
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import EXIT_DATA_ERROR, EXIT_OK, add_command, connect, non_negative_int, print_error

if TYPE_CHECKING:
    from actors.clients.cluster_status import BrokerStatus

# How often the command looks at the moves while it waits.
POLL_S = 1.0
DRAIN_EPILOG = (
    "Exit codes: 0 drained (with --dry-run: the plan printed); 1 no such broker, a partition that cannot move "
    "(nothing is moved then), or --timeout reached with moves still under way (they go on); 2 usage error; 130 "
    "interrupted (Ctrl-C; the moves go on)."
)


def add_commands(subcommands: Any) -> None:
    drain = add_command(
        subcommands,
        "drain",
        "move every replica off a broker before its node is removed",
        "Move every partition replica off one broker, as Cruise Control's remove_broker does: each goes to the "
        "running broker that holds no replica of its partition and the fewest replicas of all, through Kafka's "
        "reassignments (the new replica copies from the leader and joins the ISR, then the old one is deleted). "
        "Nothing moves if a partition cannot (no broker free to take it, no leader, or already being moved). "
        "Waits until the broker holds no replica, printing progress; the node can then be removed.",
        epilog=DRAIN_EPILOG,
    )
    drain.add_argument(
        "--broker", required=True, metavar="ID", help="the broker: its Kafka node.id, or its Ray node id"
    )
    drain.add_argument("--dry-run", action="store_true", help="print the moves and start none")
    drain.add_argument(
        "--timeout",
        type=non_negative_int,
        default=3600,
        metavar="SECONDS",
        help="how long to wait for the moves (default 3600; 0: start them and do not wait)",
    )
    drain.set_defaults(handler=run_drain)


def run_drain(args: argparse.Namespace) -> int:
    connect(args.address)
    # Ray (through the actors): loaded only when the command runs, so the CLI starts fast.
    from actors.clients.admin import Admin
    from actors.clients.broker import Broker
    from actors.clients.cluster_status import read_cluster_status

    brokers = read_cluster_status().brokers
    node = _node_of(args.broker, brokers)
    if node is None:
        print_error(f"no running broker has node.id or Ray node id {args.broker!r} (raybroker status lists them)")
        return EXIT_DATA_ERROR
    names = {broker.node: str(broker.broker_id) for broker in brokers if broker.broker_id is not None}
    admin = Admin()
    cluster = Broker.connect()
    planned = admin.drain_broker(node, dry_run=True)
    before = {(topic, partition): cluster.topic(topic).state(partition).replicas for topic, partition, _ in planned}
    moves = planned if args.dry_run else admin.drain_broker(node)
    name = names.get(node, node)
    verb = "would move" if args.dry_run else "moves"
    print(f"Broker {name} (Ray node {node}) holds {len(moves)} replicas; the drain {verb}:")
    for topic, partition, target in moves:
        print(f"  {topic}-{partition}: {_named(before.get((topic, partition), ()), names)} -> {_named(target, names)}")
    if args.dry_run or not moves:
        return EXIT_OK
    return _wait(cluster, node, name, [(topic, partition) for topic, partition, _ in moves], args.timeout)


def _node_of(wanted: str, brokers: tuple[BrokerStatus, ...]) -> str | None:
    """The Ray node of the running broker `wanted` names (its Kafka node.id or its Ray node id)."""
    for broker in brokers:
        if wanted in (broker.node, str(broker.broker_id)):
            return broker.node
    return None


def _named(replicas: tuple[str, ...], names: dict[str, str]) -> str:
    return "[" + ", ".join(names.get(node, node) for node in replicas) + "]"


def _wait(cluster: Any, node: str, name: str, partitions: list[tuple[str, int]], timeout_s: int) -> int:
    """Waits until no partition of `partitions` has a replica on `node` (`cluster`: a connected `Broker`), printing
    each change in how many did."""
    deadline = time.monotonic() + timeout_s
    left = len(partitions)
    while True:
        holding = [(t, p) for t, p in partitions if node in cluster.topic(t).state(p).replicas]
        if len(holding) != left:
            left = len(holding)
            print(f"  {len(partitions) - left} of {len(partitions)} partitions moved", flush=True)
        if not holding:
            print(f"Broker {name} holds no replica now: its node can be removed.")
            return EXIT_OK
        if time.monotonic() >= deadline:
            waiting = ", ".join(f"{t}-{p}" for t, p in holding[:5])
            print_error(f"{left} partitions still move off broker {name} after {timeout_s} s (they go on): {waiting}")
            return EXIT_DATA_ERROR
        time.sleep(POLL_S)
