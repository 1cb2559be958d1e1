"""`raybroker share-groups`, modelled on Kafka 4.2's kafka-share-groups.sh (KIP-932): `--list`, `--describe`,
`--delete`, `--reset-offsets`, `--delete-offsets`, with Kafka's options and tables.

`--list` prints the share groups' ids, or with `--state` the table `GROUP STATE` (`--state Empty,Stable` keeps the
groups in those states; Kafka's share states are Empty, Stable and Dead). `--describe` (`--group G`, several, or
`--all-groups`) prints, per group, one of Kafka's tables:
- `--offsets` (the default): `GROUP TOPIC PARTITION START-OFFSET LAG` (`--verbose`: `LEADER-EPOCH` before the start
  offset), one row per partition the group has state on, as DescribeShareGroupOffsets reports it (the start offset
  the share-partition last wrote; the lag is the records not yet acknowledged or archived above it), or "Share
  group 'G' has no offset information.";
- `--state`: `GROUP COORDINATOR (ID) STATE #MEMBERS` (`--verbose`: `GROUP-EPOCH ASSIGNMENT-EPOCH` before the count);
  every Kafka listener reaches the one group coordinator, so the coordinator shown is the listener of the lowest
  `node.id`;
- `--members`: `GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT` (`--verbose`: `MEMBER-EPOCH` before the
  assignment, written `topic:0,1;other:0`), or "Share group 'G' has no active members." for an Empty group.
A group that does not exist is an error (exit 1), as Kafka's tool reports one.

`--reset-offsets` (one `--group`, which must have no members) plans new start offsets for `--topic T` (every
partition, or `T:0,2`; `--topic` may repeat) or `--all-topics` (the partitions the group has state on):
`--to-earliest` (the log start offset), `--to-latest` (the high watermark) or `--to-datetime YYYY-MM-DDThh:mm:ss.sss`
(the first offset at or after that time, UTC unless the text names a zone; the high watermark when none is, with
Kafka's `Warn:` line). It prints
Kafka's plan `GROUP TOPIC PARTITION NEW-OFFSET` and writes it (AlterShareGroupOffsets) with `--execute`; with
`--dry-run` it writes nothing, and one of the two is required, as in Kafka 4.2.

`--delete-offsets` (one `--group` without members, `--topic` repeated) drops the group's state of whole topics
(DeleteShareGroupOffsets) and prints Kafka's `TOPIC STATUS` table; a topic the group has no state on, or that does not
exist, is `Error: ...` (exit 1). `--delete` deletes groups without members (`--group`, several, or `--all-groups`)
with their share-partitions' state.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import (
    EXIT_DATA_ERROR,
    EXIT_OK,
    UsageError,
    add_actions,
    add_command,
    connect_admin,
    print_error,
    table_lines,
)
from storage.errors import RaybrokerError, UnknownTopicOrPartitionError
from storage.kafka_uuid import uuid_text

if TYPE_CHECKING:
    from actors.clients.admin import Admin
    from actors.clients.share_groups import ShareGroups
    from actors.core.shares.share_group import ShareGroupDescription

# Kafka's share group states (`GroupState.groupStatesForType(SHARE)`), as `--state` takes them.
SHARE_STATES = ("Empty", "Stable", "Dead")
OFFSETS_HEADER = ("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG")
VERBOSE_OFFSETS_HEADER = ("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG")
STATE_HEADER = ("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS")
VERBOSE_STATE_HEADER = ("GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS")
MEMBERS_HEADER = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
VERBOSE_MEMBERS_HEADER = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT")
RESET_HEADER = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
DELETE_OFFSETS_HEADER = ("TOPIC", "STATUS")
# Kafka's `MISSING_COLUMN_VALUE`.
MISSING = "-"


def add_commands(subcommands: Any) -> None:
    groups = add_command(
        subcommands,
        "share-groups",
        "list, describe, delete share groups and reset their offsets like kafka-share-groups.sh",
        "Manage share groups (KIP-932), like Kafka 4.2's kafka-share-groups.sh. --describe prints the group's "
        "offsets (the default), --state or --members; --reset-offsets prints the new start offsets and writes them "
        "with --execute (the group must have no members).",
    )
    add_actions(
        groups,
        (
            ("list", "list the share groups (with --state: and their states)"),
            ("describe", "describe --group: its offsets (default), --state or --members"),
            ("delete", "delete --group (groups without members) and their share-partitions' state"),
            ("reset-offsets", "reset --group's start offsets: --to-earliest, --to-latest or --to-datetime"),
            ("delete-offsets", "delete --group's state of each --topic"),
        ),
    )
    groups.add_argument("--group", metavar="G", action="append", default=[], help="the share group (may repeat)")
    groups.add_argument("--all-groups", action="store_true", help="--describe, --delete: every share group")
    groups.add_argument(
        "--topic", metavar="T", action="append", default=[], help="a topic (--reset-offsets: T or T:0,2; may repeat)"
    )
    groups.add_argument("--all-topics", action="store_true", help="--reset-offsets: every partition with state")
    views = groups.add_mutually_exclusive_group()
    views.add_argument("--offsets", action="store_true", help="--describe: the offsets (the default)")
    views.add_argument("--members", action="store_true", help="--describe: the members")
    views.add_argument(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="STATES",
        help="--describe: the group's state; --list: each group's state, only those in STATES (Empty,Stable,Dead)",
    )
    groups.add_argument("--verbose", action="store_true", help="--describe: more columns")
    targets = groups.add_mutually_exclusive_group()
    targets.add_argument("--to-earliest", dest="target", action="store_const", const="earliest", help="log start")
    targets.add_argument("--to-latest", dest="target", action="store_const", const="latest", help="log end")
    targets.add_argument(
        "--to-datetime", dest="datetime", metavar="YYYY-MM-DDThh:mm:ss.sss", help="first offset at or after a time"
    )
    runs = groups.add_mutually_exclusive_group()
    runs.add_argument("--dry-run", action="store_true", help="--reset-offsets: print the plan only")
    runs.add_argument("--execute", action="store_true", help="--reset-offsets: write the plan")
    groups.set_defaults(handler=run_share_groups)


def run_share_groups(args: argparse.Namespace) -> int:
    _check(args)
    admin = connect_admin(args.address)
    groups = _share_groups()
    if args.action == "list":
        _list(args, groups)
        return EXIT_OK
    names = [g.group_id for g in groups.list_groups()] if args.all_groups else list(dict.fromkeys(args.group))
    if args.action == "describe":
        for group in sorted(names):
            _describe(args, groups, admin, group)
    elif args.action == "delete":
        for group in names:
            groups.delete_group(group, _every_partition(admin))
        print(f"Deletion of requested share groups ({', '.join(repr(g) for g in names)}) was successful.")
    elif args.action == "delete-offsets":
        return _delete_offsets(args, groups, admin)
    else:
        _reset(args, groups, admin)
    return EXIT_OK


def _check(args: argparse.Namespace) -> None:
    """Kafka's option rules, each a one-line usage error."""
    action = args.action
    if action in ("describe", "delete"):
        if bool(args.group) == args.all_groups:
            raise UsageError(f"--{action} needs --group or --all-groups (one of them)")
    elif action in ("reset-offsets", "delete-offsets"):
        if len(args.group) != 1 or args.all_groups:
            raise UsageError(f"--{action} takes exactly one --group")
    elif args.group or args.all_groups:
        raise UsageError("--list takes no --group")
    if action == "delete-offsets" and not args.topic:
        raise UsageError("--delete-offsets needs --topic")
    if action == "reset-offsets":
        if bool(args.topic) == args.all_topics:
            raise UsageError("--reset-offsets needs --topic or --all-topics (one of them)")
        if args.target is None and args.datetime is None:
            raise UsageError("--reset-offsets needs one of --to-earliest, --to-latest, --to-datetime")
        if not (args.dry_run or args.execute):
            raise UsageError("--reset-offsets needs --dry-run (print the plan) or --execute (write it)")
    elif args.target or args.datetime or args.dry_run or args.execute or args.all_topics:
        raise UsageError(
            "--to-earliest, --to-latest, --to-datetime, --all-topics, --dry-run, --execute go with --reset-offsets"
        )
    if action != "describe" and (args.members or args.offsets or args.verbose):
        raise UsageError("--members, --offsets and --verbose go with --describe")
    if action not in ("describe", "list") and args.state is not None:
        raise UsageError("--state goes with --describe or --list")
    if action == "describe" and args.state:
        raise UsageError("--state takes no value with --describe")


def _share_groups() -> ShareGroups:
    # Ray (through the actors): loaded only when a command runs, so the CLI starts fast.
    from actors.clients.share_groups import ShareGroups

    return ShareGroups()


def _list(args: argparse.Namespace, groups: ShareGroups) -> None:
    listed = groups.list_groups()
    if args.state is None:
        for group in listed:
            print(group.group_id)
        return
    wanted = _states(args.state)
    rows = [(g.group_id, g.state.value) for g in listed if not wanted or g.state.value in wanted]
    _print_table(("GROUP", "STATE"), rows)


def _states(text: str) -> set[str]:
    """`--list --state`'s states, case as Kafka's `GroupState.parse` takes them (any case)."""
    if not text.strip():
        return set()
    by_lower = {state.lower(): state for state in SHARE_STATES}
    named = [part.strip().lower() for part in text.split(",")]
    if any(name not in by_lower for name in named):
        raise UsageError(f"Invalid state list '{text}'. Valid states are: {', '.join(SHARE_STATES)}")
    return {by_lower[name] for name in named}


def _describe(args: argparse.Namespace, groups: ShareGroups, admin: Admin, group: str) -> None:
    described = groups.describe_group(group)
    if described is None:
        raise RaybrokerError(f"Share group '{group}' does not exist.")
    if args.members:
        _describe_members(args, described, admin)
    elif args.state is not None:
        _describe_state(args, described, groups)
    else:
        _describe_offsets(args, groups, admin, group)


def _describe_offsets(args: argparse.Namespace, groups: ShareGroups, admin: Admin, group: str) -> None:
    found = {key: offsets for key, offsets in groups.offsets(group, _every_partition(admin)).items() if offsets}
    if not found:
        print(f"Share group '{group}' has no offset information.")
        return
    rows = []
    for (topic, partition), offsets in sorted(found.items()):
        start = MISSING if offsets.start_offset < 0 else str(offsets.start_offset)
        lag = MISSING if offsets.start_offset < 0 else str(offsets.lag)
        epoch = (str(offsets.leader_epoch),) if args.verbose else ()
        rows.append((group, topic, str(partition), *epoch, start, lag))
    _print_table(VERBOSE_OFFSETS_HEADER if args.verbose else OFFSETS_HEADER, rows)


def _describe_state(args: argparse.Namespace, described: ShareGroupDescription, groups: ShareGroups) -> None:
    _maybe_no_members(described)
    listener = groups.coordinator()
    coordinator = MISSING if listener is None else f"{listener.host}:{listener.port}  ({listener.broker_id})"
    epochs = (str(described.group_epoch), str(described.assignment_epoch)) if args.verbose else ()
    row = (described.group_id, coordinator, described.state.value, *epochs, str(len(described.members)))
    _print_table(VERBOSE_STATE_HEADER if args.verbose else STATE_HEADER, [row])


def _describe_members(args: argparse.Namespace, described: ShareGroupDescription, admin: Admin) -> None:
    if _maybe_no_members(described):
        return
    names = _topic_names(admin)
    rows = []
    for member in sorted(described.members, key=lambda m: m.member_id):
        assigned = {
            names.get(uuid_text(topic_id), uuid_text(topic_id)): sorted(ps)
            for topic_id, ps in member.assignment.items()
        }
        text = ";".join(sorted(f"{t}:{','.join(map(str, ps))}" for t, ps in assigned.items()))
        count = str(sum(len(ps) for ps in assigned.values()))
        epoch = (str(member.member_epoch),) if args.verbose else ()
        rows.append((described.group_id, member.member_id, member.client_host, member.client_id, count, *epoch, text))
    _print_table(VERBOSE_MEMBERS_HEADER if args.verbose else MEMBERS_HEADER, rows)


def _maybe_no_members(described: ShareGroupDescription) -> bool:
    """Prints Kafka's line for an Empty group; whether the group has no members."""
    if not described.members:
        print(f"Share group '{described.group_id}' has no active members.")
    return not described.members


def _reset(args: argparse.Namespace, groups: ShareGroups, admin: Admin) -> None:
    (group,) = args.group
    described = groups.describe_group(group)
    if described is not None and described.members:
        raise RaybrokerError(f"Share group '{group}' is not empty.")
    if args.all_topics:
        partitions = sorted(key for key, found in groups.offsets(group, _every_partition(admin)).items() if found)
    else:
        partitions = [key for text in args.topic for key in _topic_partitions(admin, text)]
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    plan: dict[tuple[str, int], int] = {}
    for topic, numbers in by_topic.items():
        described_topic = {p.partition: p for p in admin.describe_topic(topic).partitions}
        found = admin.list_offsets(topic, _datetime_ms(args.datetime)) if args.datetime else {}
        for number in numbers:
            if number not in described_topic:
                raise UnknownTopicOrPartitionError(f"partition {topic}-{number} does not exist")
            bounds = described_topic[number]
            if args.target == "earliest":
                plan[(topic, number)] = bounds.log_start_offset
            elif args.target == "latest":
                plan[(topic, number)] = bounds.high_watermark
            else:
                at = found.get(number)
                if at is None:
                    print(f"Warn: Partition {number} from topic {topic} is empty. Falling back to latest known offset.")
                plan[(topic, number)] = bounds.high_watermark if at is None else at[0]
    if args.execute:
        groups.alter_offsets(group, plan)
    _print_table(RESET_HEADER, [(group, t, str(p), str(offset)) for (t, p), offset in sorted(plan.items())])


def _datetime_ms(text: str) -> int:
    """Kafka's `--to-datetime` text (`YYYY-MM-DDThh:mm:ss.sss`, optionally with a zone) in ms since the epoch; a
    time without a zone is UTC."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime takes YYYY-MM-DDThh:mm:ss.sss, not {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _delete_offsets(args: argparse.Namespace, groups: ShareGroups, admin: Admin) -> int:
    (group,) = args.group
    topics = sorted(set(args.topic))
    existing = set(admin.list_topics(include_internal=True))
    wanted = [(t, p.partition) for t in topics if t in existing for p in admin.describe_topic(t).partitions]
    had = groups.delete_offsets(group, wanted)
    statuses = {}
    for topic in topics:
        if topic not in existing:
            statuses[topic] = "Error: This server does not host this topic-partition."
        elif any(t == topic for t, _ in had):
            statuses[topic] = "Successful"
        else:
            statuses[topic] = "Error: There is no offset information to delete."
    _print_table(DELETE_OFFSETS_HEADER, sorted(statuses.items()))
    failed = [topic for topic, status in statuses.items() if status != "Successful"]
    if failed:
        print_error(f"the state of {len(failed)} topic(s) could not be deleted: {', '.join(failed)}")
        return EXIT_DATA_ERROR
    return EXIT_OK


def _topic_partitions(admin: Admin, text: str) -> list[tuple[str, int]]:
    """`T` (every partition) or `T:0,2`, as Kafka's tool takes them."""
    topic, colon, named = text.partition(":")
    if not colon:
        return [(topic, p.partition) for p in admin.describe_topic(topic).partitions]
    try:
        numbers = sorted({int(part) for part in named.split(",")})
    except ValueError:
        raise UsageError(f"--topic takes T or T:0,2 (partition numbers), not {named!r} after the colon") from None
    return [(topic, number) for number in numbers]


def _every_partition(admin: Admin) -> list[tuple[str, int]]:
    """Every partition of every topic but the internal ones (where a share group may have state)."""
    return [(t, p.partition) for t in sorted(admin.list_topics()) for p in admin.describe_topic(t).partitions]


def _topic_names(admin: Admin) -> dict[str, str]:
    """Topic id (Kafka's text) -> name."""
    named = {}
    for topic in admin.list_topics():
        description = admin.describe_topic(topic)
        named[description.topic_id] = topic
    return named


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    for line in table_lines(header, rows):
        print(line)
