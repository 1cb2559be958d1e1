"""`raybroker consumer-groups`, modelled on kafka-consumer-groups.sh: `--list`, `--describe`, `--delete`,
`--reset-offsets`, `--delete-offsets`.

Groups of Kafka clients over the wire and of raybroker's Python `Consumer` are the same groups here: both commit
to the one group coordinator. `--describe` prints Kafka's table, one line per partition the group committed or
has assigned: the committed offset, the log end offset (the high watermark, what a consumer can reach), the lag
between them, and the member it is assigned to. A member's partitions are read from its assignment in Kafka's
consumer protocol (`ConsumerProtocolAssignment`, decoded by `actors.core.groups.consumer_protocol`); an assignment
that does not decode (a group of another protocol type) shows no partitions, as Kafka's tool does. A group of Kafka
4's consumer protocol (KIP-848) shows the partitions each member owns now, as the coordinator reconciled them.

`--reset-offsets` prints the plan (`GROUP TOPIC PARTITION NEW-OFFSET`) and, with `--execute`, commits it; as
Kafka's tool, only a group without members may be reset, and `--to-offset` is clamped to each partition's log
start and end offsets.

`--delete-offsets` deletes the group's committed offsets of `--topic` (every partition, or those of `T:0,2`) and
prints Kafka's table (`TOPIC PARTITION STATUS`); an active consumer group keeps the offsets of the topics its
members subscribe to, and each such partition's status is an error (exit 1), as the coordinator answers
(`GroupCoordinator.delete_offsets`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import (
    EXIT_DATA_ERROR,
    EXIT_OK,
    UsageError,
    add_actions,
    add_command,
    connect,
    connect_admin,
    non_negative_int,
    print_error,
    table_lines,
)
from storage.errors import RaybrokerError

if TYPE_CHECKING:
    from actors.clients.consumer_groups import ConsumerGroups
    from actors.core.groups.consumer_group_api import ConsumerGroupDescription
    from actors.core.groups.group_membership import GroupDescription

DESCRIBE_HEADER = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
RESET_HEADER = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
DELETE_OFFSETS_HEADER = ("TOPIC", "PARTITION", "STATUS")


def add_commands(subcommands: Any) -> None:
    groups = add_command(
        subcommands,
        "consumer-groups",
        "list, describe, delete consumer groups and reset their offsets like kafka-consumer-groups.sh",
        "Manage consumer groups, like kafka-consumer-groups.sh: groups of Kafka clients and of raybroker's "
        "Python Consumer alike. --describe prints, per partition, the committed offset, the log end offset, the "
        "lag and the member it is assigned to. --reset-offsets prints the new offsets and commits them with "
        "--execute (the group must have no members).",
    )
    add_actions(
        groups,
        (
            ("list", "list every group"),
            ("describe", "describe --group: its offsets, lag and members"),
            ("delete", "delete --group (a group without members) and its committed offsets"),
            ("reset-offsets", "reset --group's offsets of --topic, to --to-earliest, --to-latest or --to-offset"),
            ("delete-offsets", "delete --group's committed offsets of --topic (T, or T:0,2 for some partitions)"),
        ),
    )
    groups.add_argument("--group", metavar="G", help="the group")
    groups.add_argument(
        "--topic", metavar="T", help="--reset-offsets, --delete-offsets: the topic (--delete-offsets: T or T:0,2)"
    )
    targets = groups.add_mutually_exclusive_group()
    targets.add_argument("--to-earliest", dest="target", action="store_const", const="earliest", help="log start")
    targets.add_argument("--to-latest", dest="target", action="store_const", const="latest", help="log end")
    targets.add_argument("--to-offset", dest="to_offset", type=non_negative_int, metavar="N", help="offset N")
    groups.add_argument("--execute", action="store_true", help="--reset-offsets: commit the plan (default: dry run)")
    groups.set_defaults(handler=run_consumer_groups)


def run_consumer_groups(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.group:
        raise UsageError(f"--{args.action} needs --group")
    if args.action in ("reset-offsets", "delete-offsets") and not args.topic:
        raise UsageError(f"--{args.action} needs --topic")
    if args.action == "delete-offsets":
        args.topic, args.partitions = _topic_and_partitions(args.topic)
    if args.action == "reset-offsets":
        if ":" in args.topic:
            raise UsageError("--reset-offsets takes a topic name, not partitions")
        if args.target is None and args.to_offset is None:
            raise UsageError("--reset-offsets needs one of --to-earliest, --to-latest, --to-offset")
    elif args.target is not None or args.to_offset is not None or args.execute:
        raise UsageError("--to-earliest, --to-latest, --to-offset and --execute go with --reset-offsets")
    connect(args.address)
    groups = _consumer_groups()
    if args.action == "list":
        for group in groups.list_groups():
            print(group.group_id)
    elif args.action == "describe":
        _describe(args, groups)
    elif args.action == "delete":
        groups.delete_group(args.group)
        print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
    elif args.action == "delete-offsets":
        return _delete_offsets(args, groups)
    else:
        _reset(args, groups)
    return EXIT_OK


def _consumer_groups() -> ConsumerGroups:
    # Ray (through the actors): loaded only when a command runs, so the CLI starts fast.
    from actors.clients.consumer_groups import ConsumerGroups

    return ConsumerGroups()


def _describe(args: argparse.Namespace, groups: ConsumerGroups) -> None:
    consumer_group = groups.describe_consumer_group(args.group)
    if consumer_group is not None:
        owners, has_members = _consumer_owners(consumer_group), bool(consumer_group.members)
    else:
        described = groups.describe_group(args.group)
        if described is None:
            raise RaybrokerError(f"consumer group {args.group!r} does not exist")
        owners, has_members = _owners(described), bool(described.members)
    committed = groups.committed_offsets(args.group)
    admin = connect_admin(args.address)
    topics = sorted({topic for topic, _ in committed} | {topic for topic, _ in owners})
    log_end = {
        (topic, p.partition): p.high_watermark for topic in topics for p in admin.describe_topic(topic).partitions
    }
    if not has_members:
        print(f"Consumer group '{args.group}' has no active members.")
    rows = []
    for key in sorted(set(committed) | set(owners)):
        offset = committed.get(key)
        end = log_end.get(key)
        lag = "-" if offset is None or end is None else str(max(end - offset, 0))
        member = owners.get(key)
        rows.append(
            (
                args.group,
                key[0],
                str(key[1]),
                "-" if offset is None else str(offset),
                "-" if end is None else str(end),
                lag,
                *(("-", "-", "-") if member is None else member),
            )
        )
    _print_table(DESCRIBE_HEADER, rows)


def _reset(args: argparse.Namespace, groups: ConsumerGroups) -> None:
    partitions = connect_admin(args.address).describe_topic(args.topic).partitions
    plan: dict[tuple[str, int], int] = {}
    for p in partitions:
        if args.target == "earliest":
            plan[(args.topic, p.partition)] = p.log_start_offset
        elif args.target == "latest":
            plan[(args.topic, p.partition)] = p.high_watermark
        else:
            plan[(args.topic, p.partition)] = min(max(args.to_offset, p.log_start_offset), p.high_watermark)
    if args.execute:
        groups.reset_offsets(args.group, plan)
    _print_table(
        RESET_HEADER,
        [(args.group, topic, str(partition), str(offset)) for (topic, partition), offset in sorted(plan.items())],
    )
    if not args.execute:
        print("Dry run: nothing was committed; add --execute to reset the offsets.")


def _delete_offsets(args: argparse.Namespace, groups: ConsumerGroups) -> int:
    """Deletes the offsets of `--topic` (all its partitions, or those named after a colon); prints Kafka's table.
    EXIT_DATA_ERROR if a partition's offset was kept."""
    # Ray (through the actors): loaded only when a command runs, so the CLI starts fast.
    from actors.core.groups.group_membership import GroupError

    topic = args.topic
    if args.partitions:
        wanted = [(topic, partition) for partition in args.partitions]
    else:
        wanted = [(topic, p.partition) for p in connect_admin(args.address).describe_topic(topic).partitions]
    outcomes = groups.delete_offsets(args.group, wanted)
    kept = {key: outcome for key, outcome in outcomes.items() if outcome != GroupError.NONE}
    if not kept:
        print(f"Request succeed for deleting offsets with topic {topic} group {args.group}")
    _print_table(
        DELETE_OFFSETS_HEADER,
        [
            (t, str(p), "Successful" if (t, p) not in kept else f"Error: {kept[(t, p)].value.upper()}")
            for t, p in sorted(outcomes)
        ],
    )
    if kept:
        print_error(f"the offsets of {len(kept)} partition(s) were kept: the group's members subscribe to {topic}")
        return EXIT_DATA_ERROR
    return EXIT_OK


def _topic_and_partitions(text: str) -> tuple[str, list[int]]:
    """`T` (every partition: an empty list) or `T:0,2`, as Kafka's tool takes them; a one-line usage error for
    anything else."""
    topic, colon, named = text.partition(":")
    if not colon:
        return topic, []
    try:
        numbers = [int(part) for part in named.split(",")]
    except ValueError:
        raise UsageError(f"--topic takes T or T:0,2 (partition numbers), not {named!r} after the colon") from None
    if any(number < 0 for number in numbers):
        raise UsageError(f"partition numbers are not negative: {named!r}")
    return topic, sorted(set(numbers))


def _owners(group: GroupDescription) -> dict[tuple[str, int], tuple[str, str, str]]:
    """Each assigned (topic, partition) with the member holding it (its id, host and client id), from the members'
    consumer-protocol assignments (empty outside a Stable group of protocol type "consumer", or for bytes that do
    not decode)."""
    # Loaded only when --describe runs (kio's schemas take about 0.5 s to import), so the CLI starts fast.
    from actors.core.groups.consumer_protocol import CONSUMER_PROTOCOL_TYPE, assigned_partitions

    owners: dict[tuple[str, int], tuple[str, str, str]] = {}
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return owners
    for member in group.members:
        for topic, partition in assigned_partitions(member.assignment):
            owners[(topic, partition)] = (member.member_id, member.client_host or "-", member.client_id)
    return owners


def _consumer_owners(group: ConsumerGroupDescription) -> dict[tuple[str, int], tuple[str, str, str]]:
    """Each (topic, partition) a member of a consumer-protocol group owns now, with that member."""
    return {
        (group.topic_names[topic_id], partition): (member.member_id, member.client_host or "-", member.client_id)
        for member in group.members
        for topic_id, partitions in member.assignment.items()
        for partition in partitions
    }


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    for line in table_lines(header, rows):
        print(line)
