"""`raybroker get-offsets` and `raybroker delete-records`, modelled on kafka-get-offsets.sh and
kafka-delete-records.sh.

`get-offsets` prints `topic:partition:offset` lines for a `--time` spec (Kafka's GetOffsetShell: a name, its
numeric synonym, or a timestamp in ms); `delete-records` moves a partition's log start offset and prints the new
low watermark.
"""

from __future__ import annotations

import argparse
from typing import Any

from cluster.cli.command_support import EXIT_OK, add_command, connect_admin, non_negative_int
from storage.errors import RaybrokerError

TIME_SPECS = ("earliest", "latest", "max-timestamp")
# Kafka's numeric synonyms of the ListOffsets sentinels (-4..-6 are tiered-storage specs raybroker lacks).
TIME_SYNONYMS = {"-2": "earliest", "-1": "latest", "-3": "max-timestamp"}


def _time_spec(text: str) -> str | int:
    """Kafka's GetOffsetShell `--time`: a name, its numeric synonym, or a timestamp in ms."""
    name = TIME_SYNONYMS.get(text, text)
    if name in TIME_SPECS:
        return name
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(
        f"malformed time {text!r}: use -1 or latest, -2 or earliest, -3 or max-timestamp, or a timestamp in ms"
    )


def _partition_list(text: str) -> list[int]:
    return [non_negative_int(part.strip()) for part in text.split(",") if part.strip()]


def _delete_offset(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -2
    if value < -1:
        raise argparse.ArgumentTypeError(f"expected an offset >= 0, or -1 for the high watermark, got {text!r}")
    return value


def add_commands(subcommands: Any) -> None:
    offsets = add_command(
        subcommands,
        "get-offsets",
        "print topic:partition:offset lines like kafka-get-offsets.sh",
        "For each partition, print 'topic:partition:offset' for --time: latest (-1, the default: the log end "
        "offset), earliest (-2: the log start offset), max-timestamp (-3: the record with the largest "
        "timestamp), or a timestamp in ms (the first record at or after it; partitions without one are left "
        "out).",
    )
    offsets.add_argument("--topic", metavar="T", help="the topic (default: every topic)")
    offsets.add_argument(
        "--partitions", type=_partition_list, metavar="P,Q", help="only these partitions (default: all)"
    )
    offsets.add_argument(
        "--time",
        type=_time_spec,
        default="latest",
        metavar="SPEC",
        help="earliest|latest|max-timestamp, -2|-1|-3, or a timestamp in ms (default: latest)",
    )
    offsets.add_argument(
        "--exclude-internal-topics", action="store_true", help="without --topic: leave out internal topics"
    )
    offsets.set_defaults(handler=run_get_offsets)

    delete = add_command(
        subcommands,
        "delete-records",
        "delete a partition's records below an offset like kafka-delete-records.sh",
        "Kafka's DeleteRecords: move the partition's log start offset up to --offset (-1: the high watermark); "
        "whole segments below it are deleted, reads below it fail. Prints the new low watermark.",
    )
    delete.add_argument("--topic", required=True, metavar="T", help="the topic")
    delete.add_argument("--partition", required=True, type=non_negative_int, metavar="P", help="the partition")
    delete.add_argument(
        "--offset", required=True, type=_delete_offset, metavar="O", help="the new log start offset, or -1"
    )
    delete.set_defaults(handler=run_delete_records)


def run_get_offsets(args: argparse.Namespace) -> int:
    admin = connect_admin(args.address)
    topics = [args.topic] if args.topic else admin.list_topics(include_internal=not args.exclude_internal_topics)
    wanted = None if args.partitions is None else set(args.partitions)
    matched = 0
    for topic in topics:
        answers = admin.list_offsets(topic, args.time)
        for partition in sorted(answers):
            if wanted is not None and partition not in wanted:
                continue
            matched += 1
            found = answers[partition]
            # As Kafka's tool: a partition without an answer (no record at or after the timestamp) is left out.
            if found is not None:
                print(f"{topic}:{partition}:{found[0]}")
    if matched == 0:
        raise RaybrokerError("no topic partition matches the given --topic/--partitions")
    return EXIT_OK


def run_delete_records(args: argparse.Namespace) -> int:
    low_watermark = connect_admin(args.address).delete_records(args.topic, args.partition, args.offset)
    print("Records delete operation completed:")
    print(f"partition: {args.topic}-{args.partition}\tlow_watermark: {low_watermark}")
    return EXIT_OK
