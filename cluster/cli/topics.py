"""`raybroker topics`, modelled on kafka-topics.sh: `--create`, `--list`, `--describe`, `--alter`, `--delete`.

`--describe` prints Kafka's layout (`describe_lines`), with raybroker's placement and log numbers per partition.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from cluster.cli.common import EXIT_OK, UsageError, add_command, connect_admin, key_value, positive_int
from storage.errors import TopicExistsError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from actors.clients.admin import TopicDescription


def add_commands(subcommands: Any) -> None:
    topics = add_command(
        subcommands,
        "topics",
        "create, list, describe, alter and delete topics like kafka-topics.sh",
        "Manage topics, like kafka-topics.sh. --describe prints Kafka's layout: a line 'Topic: T "
        "PartitionCount: N Configs: k=v,...', then one line per partition with its Ray node, log dir, log "
        "start and end offsets, high watermark, size and segment count.",
    )
    actions = topics.add_mutually_exclusive_group(required=True)
    for action, text in (
        ("create", "create --topic with --partitions (default 1) and --config overrides"),
        ("list", "list topic names"),
        ("describe", "describe --topic, or every topic"),
        ("alter", "grow --topic to --partitions N and/or merge --config overrides into its configs"),
        ("delete", "delete --topic (its folders go after file.delete.delay.ms)"),
    ):
        actions.add_argument(f"--{action}", dest="action", action="store_const", const=action, help=text)
    topics.add_argument("--topic", metavar="T", help="the topic")
    topics.add_argument("--partitions", type=positive_int, metavar="N", help="partition count (topics never shrink)")
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
    topics.set_defaults(handler=run_topics)


def _check_topic_options(args: argparse.Namespace) -> None:
    action = args.action
    if action in ("create", "alter", "delete") and args.topic is None:
        raise UsageError(f"topics --{action} needs --topic")
    if args.partitions is not None and action not in ("create", "alter"):
        raise UsageError("--partitions goes with --create or --alter")
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
                admin.create_topic(args.topic, args.partitions or 1, config)
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
            for name in names:
                for line in describe_lines(admin.describe_topic(name)):
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


def describe_lines(description: TopicDescription) -> list[str]:
    """Kafka's `kafka-topics.sh --describe` layout, with raybroker's placement and log numbers per partition."""
    configs = ",".join(f"{key}={value}" for key, value in sorted(description.config.items()))
    lines = [f"Topic: {description.name}\tPartitionCount: {len(description.partitions)}\tConfigs: {configs}"]
    for p in description.partitions:
        lines.append(
            f"\tTopic: {description.name}\tPartition: {p.partition}\tNode: {p.node_id}\tLogDir: {p.log_dir}"
            f"\tLogStartOffset: {p.log_start_offset}\tLogEndOffset: {p.log_end_offset}"
            f"\tHighWatermark: {p.high_watermark}\tSizeBytes: {p.size_bytes}\tSegments: {p.segments}"
        )
    return lines
