"""`raybroker drain` and `raybroker balance`: moving replicas between brokers as Cruise Control's remove_broker and
rebalance do (with Kafka's own tools an operator writes a kafka-reassign-partitions plan for them by hand).

- `drain --broker ID` moves every replica off one broker before its node is removed. `ID` is the broker's Kafka
  `node.id` (as `raybroker status` lists it) or its Ray node id. The controller plans the moves
  (`Controller.drain_broker`: each replica goes to the running broker that holds no replica of the partition and
  the fewest replicas of all) and refuses, moving nothing, when a partition cannot move (no broker is free to take
  its replica, it has no leader, or it is being moved already); the broker takes no new replica meanwhile. Then
  it lets the node go (`actors.clients.node_release`): the node's broker stops and Ray is asked to drain the node,
  which then leaves the cluster (the autoscaler terminates its machine). `--keep-broker` only moves the replicas. A
  node running the controller or the group coordinator cannot go: the drain refuses before it moves anything,
  unless `--keep-broker`.
- `balance` spreads replicas evenly over the running brokers (`Controller.balance`), so a node that joined takes
  its share of replicas and, by preferred-leader election, of leaders.

Both print the plan (`--dry-run`: and stop there), start the moves (Kafka's reassignments: the new replicas copy
from the leaders and join the ISRs, then the old ones are deleted) and wait until they are done, printing progress.

Exit codes: 0 done (with `--dry-run`: the plan printed), 1 no such broker, a partition a drain cannot move, a node
that cannot go, `--timeout` reached with moves still under way (they go on), or Ray refusing to drain the node,
2 usage error, 130 interrupted (the moves go on).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import EXIT_DATA_ERROR, EXIT_OK, add_command, connect, non_negative_int, print_error

if TYPE_CHECKING:
    from actors.clients.cluster_status import BrokerStatus
    from actors.core.replication.leader_and_isr import LeaderAndIsr

Moves = list[tuple[str, int, tuple[str, ...]]]
# How often a command looks at its moves while it waits.
POLL_S = 1.0
EPILOG = (
    "Exit codes: 0 done (with --dry-run: the plan printed); 1 no such broker, a partition a drain cannot move or a "
    "node that cannot go (nothing is moved then), --timeout reached with moves still under way (they go on), or Ray "
    "refusing to drain the node; 2 usage error; 130 interrupted (Ctrl-C; the moves go on)."
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
        "Waits until the broker holds no replica, printing progress, then stops the broker and asks Ray to drain "
        "its node (Ray schedules nothing more there and the node leaves the cluster once idle).",
        epilog=EPILOG,
    )
    drain.add_argument(
        "--broker", required=True, metavar="ID", help="the broker: its Kafka node.id, or its Ray node id"
    )
    drain.add_argument(
        "--keep-broker",
        action="store_true",
        help="only move the replicas: the broker keeps running and Ray is not asked to drain its node",
    )
    _add_plan_options(drain)
    drain.set_defaults(handler=run_drain)
    balance = add_command(
        subcommands,
        "balance",
        "spread replicas evenly over the running brokers",
        "Spread partition replicas evenly over the running brokers, as Cruise Control's rebalance does for its "
        "replica distribution goal: replicas move from the broker holding the most to the one holding the fewest "
        "until every count is within one of the others, followers before leaders, so a broker that joined takes "
        "its share (and, by preferred-leader election, its share of leaders). Waits until the moves are done.",
        epilog=EPILOG,
    )
    _add_plan_options(balance)
    balance.set_defaults(handler=run_balance)


def _add_plan_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="print the moves and start none")
    parser.add_argument(
        "--timeout",
        type=non_negative_int,
        default=3600,
        metavar="SECONDS",
        help="how long to wait for the moves (default 3600; 0: start them and do not wait)",
    )


def run_drain(args: argparse.Namespace) -> int:
    connect(args.address)
    # Ray (through the actors): loaded only when the command runs, so the CLI starts fast.
    from actors.clients.admin import Admin
    from actors.clients.cluster_status import read_cluster_status

    brokers = read_cluster_status().brokers
    node = _node_of(args.broker, brokers)
    if node is None:
        print_error(f"no running broker has node.id or Ray node id {args.broker!r} (raybroker status lists them)")
        return EXIT_DATA_ERROR
    names = _names(brokers)
    name = names.get(node, node)
    release = not (args.keep_broker or args.dry_run)
    if release:
        from actors.clients.node_release import kept_by

        reason = kept_by(node)
        if reason is not None:
            print_error(f"{reason} (--keep-broker only moves its replicas)")
            return EXIT_DATA_ERROR
    admin = Admin()
    code = _plan_and_move(
        lambda dry_run: admin.drain_broker(node, dry_run=dry_run),
        args,
        names,
        f"Broker {name} (Ray node {node}) holds {{count}} replicas; the drain {{verb}}:",
        lambda state: node not in state.replicas,
        f"Broker {name} holds no replica now.",
    )
    if code != EXIT_OK or not release:
        return code
    return _release(node, name)


def _release(node: str, name: str) -> int:
    """Stops the drained broker and asks Ray to drain its node (`release_node`), saying what Ray answered."""
    from actors.clients.node_release import release_node

    print(f"Stopping broker {name} and asking Ray to drain node {node}.", flush=True)
    released = release_node(node)
    if released.ray_accepted:
        print(f"Ray drains node {node}: it takes no new work and leaves the cluster once idle.")
        return EXIT_OK
    print_error(f"broker {name} stopped, but Ray did not accept draining node {node}: {released.ray_refusal}")
    return EXIT_DATA_ERROR


def run_balance(args: argparse.Namespace) -> int:
    connect(args.address)
    from actors.clients.admin import Admin
    from actors.clients.cluster_status import read_cluster_status

    admin = Admin()
    return _plan_and_move(
        lambda dry_run: admin.balance(dry_run=dry_run),
        args,
        _names(read_cluster_status().brokers),
        "Balancing {verb} {count} replicas:",
        lambda state: not state.reassigning,
        "Replicas are balanced.",
    )


def _plan_and_move(
    plan: Callable[[bool], Moves],
    args: argparse.Namespace,
    names: dict[str, str],
    heading: str,
    moved: Callable[[LeaderAndIsr], bool],
    done: str,
) -> int:
    """Plans the moves (a dry run), prints them with the replicas they start from, starts them unless `--dry-run`
    and waits until `moved` holds for each partition (`_wait`)."""
    from actors.clients.broker import Broker

    cluster = Broker.connect()
    planned = plan(True)
    before = {(topic, partition): cluster.topic(topic).state(partition).replicas for topic, partition, _ in planned}
    moves = planned if args.dry_run else plan(False)
    print(heading.format(count=len(moves), verb="would move" if args.dry_run else "moves"))
    for topic, partition, target in moves:
        start = before.get((topic, partition), ())
        print(f"  {topic}-{partition}: {_named(start, names)} -> {_named(target, names)}")
    if args.dry_run or not moves:
        return EXIT_OK
    return _wait(cluster, [(topic, partition) for topic, partition, _ in moves], moved, done, args.timeout)


def _names(brokers: tuple[BrokerStatus, ...]) -> dict[str, str]:
    """Each running broker's name in the plan: its Kafka node.id where its listener runs, else its Ray node id."""
    return {broker.node: str(broker.broker_id) for broker in brokers if broker.broker_id is not None}


def _node_of(wanted: str, brokers: tuple[BrokerStatus, ...]) -> str | None:
    """The Ray node of the running broker `wanted` names (its Kafka node.id or its Ray node id)."""
    for broker in brokers:
        if wanted in (broker.node, str(broker.broker_id)):
            return broker.node
    return None


def _named(replicas: tuple[str, ...], names: dict[str, str]) -> str:
    return "[" + ", ".join(names.get(node, node) for node in replicas) + "]"


def _wait(
    cluster: Any,
    partitions: list[tuple[str, int]],
    moved: Callable[[LeaderAndIsr], bool],
    done: str,
    timeout_s: int,
) -> int:
    """Waits until `moved` holds for every partition of `partitions` (`cluster`: a connected `Broker`), printing
    each change in how many it holds for."""
    deadline = time.monotonic() + timeout_s
    left = len(partitions)
    while True:
        waiting = [(t, p) for t, p in partitions if not moved(cluster.topic(t).state(p))]
        if len(waiting) != left:
            left = len(waiting)
            print(f"  {len(partitions) - left} of {len(partitions)} partitions moved", flush=True)
        if not waiting:
            print(done)
            return EXIT_OK
        if time.monotonic() >= deadline:
            named = ", ".join(f"{t}-{p}" for t, p in waiting[:5])
            print_error(f"{left} partitions still move after {timeout_s} s (they go on): {named}")
            return EXIT_DATA_ERROR
        time.sleep(POLL_S)
