"""`raybroker reassign`: kafka-reassign-partitions.sh's actions, flags, files and printed lines, run over Ray instead
of a Kafka listener (Kafka's tool itself works unchanged against a raybroker listener). The files and lines are
`cluster.cli.reassign_plans`'; the moves are the controller's reassignments (`actors.core.controller.reassignment`:
the new replicas copy from the leader and join the ISR, leadership moves off a removed replica, then the removed
replicas are deleted).

- `--generate --topics-to-move-json-file F --broker-list 1,2,3`: the topics' current assignment and a proposed one
  over the listed running brokers (each partition keeps its replication factor; replicas and preferred leaders
  spread by the controller's placement rule, `actors.core.controller.assignment.place_replicas`, over those
  brokers alone). Brokers of the list that are not running are left out, as Kafka's tool leaves them. Nothing moves.
- `--execute --reassignment-json-file F`: prints the current assignment of the file's partitions (to save for a
  rollback), then starts the moves. Refused while other moves are under way, unless `--additional`; with
  `--disallow-replication-factor-change` (KIP-860), a move that changes a partition's number of replicas is
  refused.
  With `--throttle B/s`, first sets Kafka's replication throttles
  (`actors.core.quotas.replication_quotas`): the moving partitions' `leader.replication.throttled.replicas` (their
  current replicas) and `follower.replication.throttled.replicas` (the replicas they add), and
  `leader.replication.throttled.rate` and `follower.replication.throttled.rate` of every broker involved, as
  Kafka's tool does (`cluster.cli.reassign_plans.reassignment_throttles`); run it again with another rate to change
  the throttle of the moves under way.
- `--verify --reassignment-json-file F`: each partition's move completed, still in progress, or absent with other
  replicas than planned. Once none is in progress, clears every throttle: the rates of every running broker and of
  the plan's brokers, and the plan's topics' throttled-replicas lists (unless `--preserve-throttles`).
- `--cancel --reassignment-json-file F`: cancels the file's moves in progress; their partitions keep the replicas
  they had before; then clears the throttles as `--verify` (unless `--preserve-throttles`).
- `--list`: the moves in progress.

Not supported (refused, or absent): moving a replica between the log dirs of its broker (`log_dirs` other than
"any") and its throttle (`--replica-alter-log-dirs-throttle`).

Exit codes: 0 done; 1 refused (a file that does not parse or plans nothing, an unknown topic, partition or broker,
moves under way without --additional: nothing changed; a move the controller refuses: the file's other moves went
ahead, as with Kafka's tool), one line on stderr; 2 usage error.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import (
    EXIT_DATA_ERROR,
    EXIT_OK,
    UsageError,
    add_actions,
    add_command,
    connect,
    print_error,
)
from cluster.cli.reassign_plans import (
    Assignment,
    BrokerName,
    Move,
    PlanError,
    Throttles,
    cancellable,
    list_lines,
    parse_broker_list,
    parse_reassignment,
    parse_topics,
    partition_name,
    reassignment_json,
    reassignment_throttles,
    verify_lines,
)
from storage.arguments import is_int

if TYPE_CHECKING:
    from actors.clients.admin import Admin
    from actors.clients.broker import Broker

EPILOG = (
    "Exit codes: 0 done; 1 refused (a file that does not parse, an unknown topic, partition or broker, moves "
    "under way without --additional: nothing changed; a move the controller refuses: the file's other moves went "
    "ahead, as with Kafka's tool), one line on stderr; 2 usage error."
)
# The files each action needs, and the options it takes besides them (Kafka's tool refuses the others).
REQUIRED = {
    "generate": ("topics_to_move_json_file", "broker_list"),
    "execute": ("reassignment_json_file",),
    "verify": ("reassignment_json_file",),
    "cancel": ("reassignment_json_file",),
    "list": (),
}
PERMITTED = {
    "execute": ("additional", "disallow_replication_factor_change", "throttle"),
    "verify": ("preserve_throttles",),
    "cancel": ("preserve_throttles",),
}
FLAGS = {
    "topics_to_move_json_file": "--topics-to-move-json-file",
    "broker_list": "--broker-list",
    "reassignment_json_file": "--reassignment-json-file",
    "additional": "--additional",
    "disallow_replication_factor_change": "--disallow-replication-factor-change",
    "throttle": "--throttle",
    "preserve_throttles": "--preserve-throttles",
}
# Kafka's tool's defaults of the options whose absence is not None.
UNSET = {"throttle": -1}
# The throttle keys `--verify` and `--cancel` clear, as Kafka's tool's BROKER_LEVEL_THROTTLES and TOPIC_LEVEL_THROTTLES.
BROKER_LEVEL_THROTTLES = (
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
)
TOPIC_LEVEL_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
MUST_VERIFY = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed."
)
CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one."
)


def add_commands(subcommands: Any) -> None:
    parser = add_command(
        subcommands,
        "reassign",
        "move partition replicas between brokers, as kafka-reassign-partitions does",
        "Move partition replicas between brokers with kafka-reassign-partitions.sh's actions, JSON files and "
        "output: generate a plan, execute it, verify it, cancel it, list the moves in progress. Brokers are "
        "their Kafka node.id (raybroker status lists them). A move copies the partition to its new replicas, "
        "which join the ISR, then deletes the replicas it removes.",
        epilog=EPILOG,
    )
    add_actions(
        parser,
        [
            ("generate", "print the current assignment of some topics and a proposed one over some brokers"),
            ("execute", "start the moves of a reassignment file"),
            ("verify", "tell whether the moves of a reassignment file are done"),
            ("cancel", "cancel the moves of a reassignment file that are in progress"),
            ("list", "list the moves in progress"),
        ],
    )
    parser.add_argument(
        "--topics-to-move-json-file",
        metavar="FILE",
        help='with --generate: the topics to move, {"version":1,"topics":[{"topic":"a"}]}',
    )
    parser.add_argument(
        "--broker-list", metavar="IDS", help="with --generate: the brokers to spread them over, e.g. 1,2,3"
    )
    parser.add_argument(
        "--reassignment-json-file",
        metavar="FILE",
        help="the plan (the JSON --generate proposes, or one written by hand)",
    )
    parser.add_argument(
        "--additional", action="store_true", help="with --execute: start the moves while others are under way"
    )
    parser.add_argument(
        "--disallow-replication-factor-change",
        action="store_true",
        help="with --execute: refuse a move that changes a partition's number of replicas (KIP-860)",
    )
    parser.add_argument(
        "--throttle",
        type=int,
        default=-1,
        metavar="B/S",
        help="with --execute: bound the moves' replication to this many bytes a second per broker, until --verify "
        "finds them done (Kafka's leader and follower replication throttles)",
    )
    parser.add_argument(
        "--preserve-throttles",
        action="store_true",
        help="with --verify or --cancel: leave the throttles set",
    )
    parser.set_defaults(handler=run_reassign)


def run_reassign(args: argparse.Namespace) -> int:
    _check_options(args)
    try:
        text = {
            name: Path(getattr(args, name)).read_text(encoding="utf-8")
            for name in ("topics_to_move_json_file", "reassignment_json_file")
            if getattr(args, name) is not None
        }
        # The files are read and checked before the cluster is reached.
        if args.action == "generate":
            topics, brokers = parse_topics(text["topics_to_move_json_file"]), parse_broker_list(args.broker_list)
        elif args.action != "list":
            plan = parse_reassignment(text["reassignment_json_file"])
        reassignments = Reassignments.connect(args.address)
        if args.action == "generate":
            lines = reassignments.generate(topics, brokers)
        elif args.action == "list":
            lines = reassignments.listed()
        elif args.action == "execute":
            lines = reassignments.execute(
                plan, args.additional, not args.disallow_replication_factor_change, args.throttle
            )
        elif args.action == "verify":
            lines = reassignments.verify(plan, args.preserve_throttles)
        else:
            lines = reassignments.cancel(plan, args.preserve_throttles)
    except PlanError as exc:
        print_error(str(exc))
        return EXIT_DATA_ERROR
    for line in lines:
        print(line)
    return EXIT_OK


def _check_options(args: argparse.Namespace) -> None:
    """Kafka's tool's rules: the action's files are given, and no option it does not take (`UsageError`)."""
    for name in REQUIRED[args.action]:
        if getattr(args, name) is None:
            raise UsageError(f"--{args.action} needs {FLAGS[name]}")
    allowed = set(REQUIRED[args.action]) | set(PERMITTED.get(args.action, ()))
    for name, flag in FLAGS.items():
        if name not in allowed and getattr(args, name) not in (None, False, UNSET.get(name)):
            raise UsageError(f'Option "{flag}" can\'t be used with action "--{args.action}"')


class Reassignments:
    """The actions over an `Admin` client, brokers named by their Kafka node.id (see `cluster.cli.reassign_plans`).
    Each answers the lines to print, or raises `PlanError` (see the exit codes in the module docstring)."""

    def __init__(self, admin: Admin, cluster: Broker) -> None:
        """`admin` and `cluster` are clients of the same running broker."""
        self._admin = admin
        self._cluster = cluster
        described = admin.describe_cluster()
        self._names: dict[str, BrokerName] = {node: described.node_ids.get(node, node) for node in described.brokers}
        self._nodes = {name: node for node, name in self._names.items()}

    @classmethod
    def connect(cls, address: str | None) -> Reassignments:
        """The actions over the cluster at `address` (`cluster.runtime.connect_to_cluster`), one connection."""
        connect(address)
        # Ray (through the actors): loaded only when the command runs, so the CLI starts fast.
        from actors.clients.admin import Admin
        from actors.clients.broker import Broker

        cluster = Broker.connect()
        return cls(Admin(cluster), cluster)

    def generate(self, topics: Sequence[str], brokers: Sequence[BrokerName]) -> list[str]:
        from actors.core.controller.assignment import place_replicas

        current = self._current_of_topics(topics)
        chosen = [self._nodes[broker] for broker in brokers if broker in self._nodes]
        proposed: Assignment = {}
        for topic in topics:
            partitions = sorted(partition for name, partition in current if name == topic)
            factor = len(current[(topic, partitions[0])]) if partitions else 0
            if factor > len(chosen):
                raise PlanError(f"Replication factor: {factor} larger than available brokers: {len(chosen)}.")
            placed = place_replicas(len(partitions), factor, chosen, [], topic)
            for partition, replicas in zip(partitions, placed, strict=True):
                proposed[(topic, partition)] = self._named(replicas)
        return [
            "Current partition replica assignment",
            reassignment_json(current),
            "",
            "Proposed partition reassignment configuration",
            reassignment_json(proposed),
        ]

    def execute(
        self, plan: Assignment, additional: bool, allow_factor_change: bool = True, throttle: int = -1
    ) -> list[str]:
        moves = self._moves()
        if moves and not additional:
            raise PlanError(CANNOT_EXECUTE)
        for replicas in plan.values():
            unknown = next((broker for broker in replicas if broker not in self._nodes), None)
            if unknown is not None:
                raise PlanError(f"Unknown broker id {unknown}")
        current = self._current_of_partitions(plan)
        throttled: list[str] = []
        if throttle >= 0:
            throttled = [MUST_VERIFY, *self._set_throttles(reassignment_throttles(plan, moves, current), throttle)]
        failed = self._admin.alter_partition_reassignments(
            {key: tuple(self._nodes[broker] for broker in replicas) for key, replicas in plan.items()},
            allow_factor_change,
        )
        _check_answers(failed, "Error reassigning partition(s)")
        started = ",".join(partition_name(key) for key in sorted(plan))
        return [
            "Current partition replica assignment",
            "",
            reassignment_json(current),
            "",
            "Save this to use as the --reassignment-json-file option during rollback",
            *throttled,
            f"Successfully started partition reassignment{'' if len(plan) == 1 else 's'} for {started}",
        ]

    def verify(self, plan: Assignment, preserve_throttles: bool = False) -> list[str]:
        current = self._current_of_topics(sorted({topic for topic, _ in plan}), missing_ok=True)
        moves = self._moves()
        lines = verify_lines(plan, moves, current)
        if preserve_throttles or any(key in moves for key in plan):
            return lines
        return [*lines, *self._clear_throttles(plan)]

    def cancel(self, plan: Assignment, preserve_throttles: bool = False) -> list[str]:
        cancelled = cancellable(self._moves(), plan)
        if not cancelled:
            lines = ["None of the specified partition reassignments are active."]
        else:
            failed = self._admin.alter_partition_reassignments(dict.fromkeys(cancelled))
            _check_answers(failed, "Error cancelling partition reassignment(s) for")
            names = ",".join(partition_name(key) for key in cancelled)
            lines = [f"Successfully cancelled partition reassignment{'' if len(cancelled) == 1 else 's'} for: {names}"]
        # Kafka's tool prints this line without its end: what it prints next follows on the same line.
        last = "None of the specified partition moves are active."
        if preserve_throttles:
            return [*lines, last]
        first, *rest = self._clear_throttles(plan)
        return [*lines, last + first, *rest]

    def _set_throttles(self, throttles: Throttles, rate: int) -> list[str]:
        """Sets `throttles` with `rate` (Kafka's `modifyReassignmentThrottle`): the topics' lists, then the brokers'
        rates; the line Kafka's tool prints."""
        for topic in sorted(set(throttles.leader) | set(throttles.follower)):
            self._admin.alter_topic_config(
                topic,
                {
                    **({TOPIC_LEVEL_THROTTLES[0]: throttles.leader[topic]} if topic in throttles.leader else {}),
                    **({TOPIC_LEVEL_THROTTLES[1]: throttles.follower[topic]} if topic in throttles.follower else {}),
                },
            )
        for broker in throttles.brokers:
            self._admin.alter_broker_configs(str(broker), dict.fromkeys(BROKER_LEVEL_THROTTLES[:2], str(rate)))
        return [f"The inter-broker throttle limit was set to {rate} B/s"]

    def _clear_throttles(self, plan: Assignment) -> list[str]:
        """Deletes every throttle (Kafka's `clearAllThrottles`): the rates of every running broker and of the plan's
        brokers, the throttled-replicas lists of the plan's topics; the lines Kafka's tool prints."""
        brokers = sorted(
            {name for name in self._names.values() if is_int(name)}
            | {broker for replicas in plan.values() for broker in replicas if is_int(broker)}
        )
        for broker in brokers:
            self._admin.alter_broker_configs(str(broker), dict.fromkeys(BROKER_LEVEL_THROTTLES))
        topics = sorted({topic for topic, _ in plan})
        for topic in topics:
            self._admin.alter_topic_config(topic, dict.fromkeys(TOPIC_LEVEL_THROTTLES))
        return [
            f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
            + ",".join(str(broker) for broker in brokers),
            f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}",
        ]

    def listed(self) -> list[str]:
        return list_lines(self._moves())

    def _moves(self) -> dict[tuple[str, int], Move]:
        return {
            (state.topic, state.partition): Move(
                self._named(state.replicas), self._named(state.adding), self._named(state.removing)
            )
            for state in self._admin.list_partition_reassignments()
        }

    def _current_of_topics(self, topics: Sequence[str], missing_ok: bool = False) -> Assignment:
        """The replicas of every partition of `topics`; an unknown topic is `PlanError`, or left out with
        `missing_ok`."""
        current: Assignment = {}
        for topic in topics:
            current.update(self._current_of_topic(topic, missing_ok))
        return current

    def _current_of_partitions(self, plan: Mapping[tuple[str, int], object]) -> Assignment:
        current = self._current_of_topics(sorted({topic for topic, _ in plan}))
        missing = [partition_name(key) for key in sorted(plan) if key not in current]
        if missing:
            raise PlanError(f"Unable to find partition: {', '.join(missing)}")
        return {key: current[key] for key in plan}

    def _current_of_topic(self, topic: str, missing_ok: bool = False) -> Assignment:
        from storage.errors import UnknownTopicOrPartitionError

        try:
            metadata = self._cluster.topic(topic)
        except UnknownTopicOrPartitionError:
            if missing_ok:
                return {}
            raise PlanError(f"Topic {topic} not found.") from None
        return {(topic, state.partition): self._named(state.replicas) for state in metadata.states()}

    def _named(self, nodes: Sequence[str]) -> tuple[BrokerName, ...]:
        return tuple(self._names.get(node, node) for node in nodes)


def _check_answers(answers: Mapping[tuple[str, int], Exception | None], heading: str) -> None:
    """`PlanError` naming each partition the controller refused, after `heading` (Kafka's tool's words); the
    others of the request went ahead, as with Kafka's tool."""
    refused = {key: error for key, error in answers.items() if error is not None}
    if refused:
        named = "; ".join(f"{partition_name(key)}: {refused[key]}" for key in sorted(refused))
        others = " (the others went ahead)" if len(refused) < len(answers) else ""
        raise PlanError(f"{heading}: {named}{others}")
