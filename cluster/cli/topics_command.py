"""`raybroker topics`, modelled on kafka-topics.sh: `--create`, `--list`, `--describe`, `--alter`, `--delete`.

`--describe` prints Kafka's layout (`describe_lines`): a topic line with its topic id, partition count, replication
factor and config overrides, then per partition its leader, replicas and in-sync replicas, each broker named by the
`node.id` of its node's Kafka listener (its Ray node id when that node runs none) and an offline partition's leader as
`none`, followed by raybroker's placement and log numbers (the leader's). `--under-replicated-partitions` and
`--unavailable-partitions` print, as kafka-topics does, only the partition lines that are under-replicated (fewer
replicas in sync than assigned) or have no running leader, without the topic lines.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import (
    EXIT_OK,
    UsageError,
    add_actions,
    add_command,
    connect_admin,
    key_value,
    positive_int,
)
from storage.errors import TopicExistsError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from actors.clients.admin import ClusterDescription, PartitionDescription, TopicDescription

# kafka-topics' leader of a partition that has none.
NO_LEADER = "none"


def add_commands(subcommands: Any) -> None:
    topics = add_command(
        subcommands,
        "topics",
        "create, list, describe, alter and delete topics like kafka-topics.sh",
        "Manage topics, like kafka-topics.sh. --describe prints Kafka's layout: a line 'Topic: T TopicId: I "
        "PartitionCount: N ReplicationFactor: R Configs: k=v,...', then one line per partition 'Topic: T "
        "Partition: P Leader: L Replicas: A,B Isr: A,B' (brokers by their listener's node.id, else their Ray node "
        "id; 'Leader: none' when no in-sync replica runs) followed by the leader's Ray node, log dir, log start "
        "and end offsets, high watermark, size and segment count. With --under-replicated-partitions and/or "
        "--unavailable-partitions only the partition lines they select are printed.",
    )
    add_actions(
        topics,
        (
            ("create", "create --topic with --partitions (default 1), --replication-factor and --config overrides"),
            ("list", "list topic names"),
            ("describe", "describe --topic, or every topic"),
            ("alter", "grow --topic to --partitions N and/or merge --config overrides into its configs"),
            ("delete", "delete --topic (its folders go after file.delete.delay.ms)"),
        ),
    )
    topics.add_argument("--topic", metavar="T", help="the topic")
    topics.add_argument("--partitions", type=positive_int, metavar="N", help="partition count (topics never shrink)")
    topics.add_argument(
        "--replication-factor",
        type=positive_int,
        metavar="N",
        help="--create: replicas of each partition, on distinct brokers (default: the broker's "
        "default.replication.factor); at most the number of running brokers",
    )
    topics.add_argument(
        "--config",
        type=key_value,
        action="append",
        metavar="KEY=VALUE",
        help="a topic config in Kafka's names, e.g. retention.ms=60000 (may be repeated)",
    )
    topics.add_argument("--if-not-exists", action="store_true", help="--create: do nothing if the topic exists")
    topics.add_argument("--if-exists", action="store_true", help="--alter/--delete/--describe: do nothing if missing")
    topics.add_argument("--exclude-internal", action="store_true", help="--list/--describe: leave out internal topics")
    topics.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="--describe: only the partitions with fewer replicas in sync than assigned",
    )
    topics.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="--describe: only the partitions whose leader is not available",
    )
    topics.set_defaults(handler=run_topics)


def _check_topic_options(args: argparse.Namespace) -> None:
    action = args.action
    if action in ("create", "alter", "delete") and args.topic is None:
        raise UsageError(f"topics --{action} needs --topic")
    if args.partitions is not None and action not in ("create", "alter"):
        raise UsageError("--partitions goes with --create or --alter")
    if args.replication_factor is not None and action != "create":
        raise UsageError("--replication-factor goes with --create")
    if (args.under_replicated_partitions or args.unavailable_partitions) and action != "describe":
        raise UsageError("--under-replicated-partitions and --unavailable-partitions go with --describe")
    if args.config and action not in ("create", "alter"):
        raise UsageError("--config goes with --create or --alter")
    if action == "alter" and args.partitions is None and not args.config:
        raise UsageError("topics --alter needs --partitions N and/or --config KEY=VALUE")
    if args.if_not_exists and action != "create":
        raise UsageError("--if-not-exists goes with --create")
    if args.if_exists and action not in ("alter", "delete", "describe"):
        raise UsageError("--if-exists goes with --alter, --delete or --describe")
    if args.topic is not None and action == "list":
        raise UsageError("--list takes no --topic (use --describe --topic T)")


def run_topics(args: argparse.Namespace) -> int:
    _check_topic_options(args)
    admin = connect_admin(args.address)
    action = args.action
    config = dict(args.config or ())
    try:
        if action == "create":
            try:
                admin.create_topic(args.topic, args.partitions or 1, config, args.replication_factor)
            except TopicExistsError:
                if not args.if_not_exists:
                    raise
                return EXIT_OK
            print(f"Created topic {args.topic}.")
        elif action == "list":
            for name in admin.list_topics(include_internal=not args.exclude_internal):
                print(name)
        elif action == "describe":
            names = [args.topic] if args.topic else admin.list_topics(include_internal=not args.exclude_internal)
            cluster = admin.describe_cluster()
            for name in names:
                lines = describe_lines(
                    admin.describe_topic(name),
                    cluster,
                    under_replicated=args.under_replicated_partitions,
                    unavailable=args.unavailable_partitions,
                )
                for line in lines:
                    print(line)
        elif action == "alter":
            if args.partitions is not None:
                admin.add_partitions(args.topic, args.partitions)
            if config:
                admin.alter_topic_config(args.topic, config)
        else:
            admin.delete_topic(args.topic)
    except UnknownTopicOrPartitionError:
        if args.if_exists and args.topic is not None:
            return EXIT_OK
        raise
    return EXIT_OK


def describe_lines(
    description: TopicDescription,
    cluster: ClusterDescription,
    under_replicated: bool = False,
    unavailable: bool = False,
) -> list[str]:
    """Kafka's `kafka-topics.sh --describe` layout, with raybroker's placement and log numbers per partition; with
    `under_replicated` and/or `unavailable`, only the partition lines either selects, as kafka-topics prints them."""
    selected = [
        p
        for p in description.partitions
        if not (under_replicated or unavailable)
        or (under_replicated and p.under_replicated)
        or (unavailable and (p.offline or p.node_id not in cluster.brokers))
    ]
    lines = [] if under_replicated or unavailable else [_topic_line(description)]
    lines.extend(_partition_line(description.name, p, cluster) for p in selected)
    return lines


def _topic_line(description: TopicDescription) -> str:
    configs = ",".join(f"{key}={value}" for key, value in sorted(description.config.items()))
    topic_id = f"\tTopicId: {description.topic_id}" if description.topic_id else ""
    return (
        f"Topic: {description.name}{topic_id}\tPartitionCount: {len(description.partitions)}"
        f"\tReplicationFactor: {description.replication_factor}\tConfigs: {configs}"
    )


def _partition_line(topic: str, p: PartitionDescription, cluster: ClusterDescription) -> str:
    """A partition's kafka-topics line; an offline partition has no leader to give log numbers, so its line ends
    with its in-sync replicas."""

    def broker(node: str) -> str:
        node_id = cluster.node_ids.get(node)
        return node if node_id is None else str(node_id)

    leader = NO_LEADER if p.offline else broker(p.node_id)
    line = (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}"
        f"\tReplicas: {','.join(map(broker, p.replicas))}\tIsr: {','.join(map(broker, p.isr))}"
    )
    if p.offline:
        return line
    return (
        f"{line}\tNode: {p.node_id}\tLogDir: {p.log_dir}"
        f"\tLogStartOffset: {p.log_start_offset}\tLogEndOffset: {p.log_end_offset}"
        f"\tHighWatermark: {p.high_watermark}\tSizeBytes: {p.size_bytes}\tSegments: {p.segments}"
    )
