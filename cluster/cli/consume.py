"""`raybroker consume`, modelled on kafka-console-consumer.sh: records as text lines.

Each record is printed by Kafka's DefaultMessageFormatter layout (`RecordFormat`). Without `--partition` the
command reads every partition of the topic from the group's committed offsets, else from the end (or the
beginning with `--from-beginning`); it runs until `--max-messages`, until idle for `--timeout-ms`, or until
Ctrl-C, and prints the count to stderr.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import (
    EXIT_OK,
    UsageError,
    add_command,
    connect,
    non_negative_int,
    positive_int,
    set_on_interrupt,
)
from storage.records.record_batch import TimestampType

if TYPE_CHECKING:
    from actors.clients.consumer import Consumer, ConsumerRecord

# One poll waits at most this long, so `--timeout-ms` and Ctrl-C are noticed promptly.
POLL_TIMEOUT_MS = 500


def _consume_offset(text: str) -> str | int:
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        return non_negative_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"invalid offset {text!r}: valid values are 'earliest', 'latest', or an integer >= 0"
        ) from None


def add_commands(subcommands: Any) -> None:
    consume = add_command(
        subcommands,
        "consume",
        "print records as text lines like kafka-console-consumer.sh",
        "Print records as lines: optional 'CreateTime:<ms>', 'Partition:<p>', 'Offset:<o>' and the key, then "
        "the value, separated by --key-separator (Kafka's DefaultMessageFormatter). Keys and values are shown as "
        "UTF-8 text; bytes that are not UTF-8 appear as \\xNN escapes and a missing key or value as 'null'. "
        "Without --partition, reads every partition of the topic from the group's committed offsets, else "
        "from the end (or the beginning with --from-beginning). Runs until --max-messages, until idle for "
        "--timeout-ms, or until Ctrl-C; the count goes to stderr.",
    )
    consume.add_argument("--topic", required=True, metavar="T", help="the topic")
    consume.add_argument(
        "--from-beginning",
        action="store_true",
        help="start from the log start offset when there is no committed offset (default: the end)",
    )
    consume.add_argument("--partition", type=non_negative_int, metavar="P", help="read only this partition")
    consume.add_argument(
        "--offset",
        type=_consume_offset,
        metavar="O",
        help="with --partition: start at this offset, 'earliest' or 'latest' (default: latest)",
    )
    consume.add_argument("--max-messages", type=positive_int, metavar="N", help="exit after printing N records")
    consume.add_argument(
        "--timeout-ms", type=non_negative_int, metavar="MS", help="exit when no record came for MS milliseconds"
    )
    consume.add_argument(
        "--group", metavar="G", help="consumer group: start at its committed offsets and commit what was printed"
    )
    consume.add_argument("--print-key", action="store_true", help="print the key before the value")
    consume.add_argument("--print-offset", action="store_true", help="print 'Offset:<o>'")
    consume.add_argument("--print-partition", action="store_true", help="print 'Partition:<p>'")
    consume.add_argument("--print-timestamp", action="store_true", help="print '<timestamp type>:<ms>'")
    consume.add_argument(
        "--key-separator",
        metavar="SEP",
        default="\t",
        help="between the printed fields (Kafka's key.separator; default: tab)",
    )
    consume.set_defaults(handler=run_consume)


@dataclass(frozen=True, slots=True)
class RecordFormat:
    """Kafka's DefaultMessageFormatter: optional timestamp, partition, offset and key, then the value, joined
    by the separator (`print.timestamp`, `print.partition`, `print.offset`, `print.key`, `key.separator`)."""

    timestamp: bool = False
    partition: bool = False
    offset: bool = False
    key: bool = False
    separator: str = "\t"

    def render(self, record: ConsumerRecord) -> str:
        fields = []
        if self.timestamp:
            if record.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
                fields.append("NO_TIMESTAMP")
            else:
                fields.append(f"{record.timestamp_type.kafka_name}:{record.timestamp}")
        if self.partition:
            fields.append(f"Partition:{record.partition}")
        if self.offset:
            fields.append(f"Offset:{record.offset}")
        if self.key:
            fields.append(as_text(record.key))
        fields.append(as_text(record.value))
        return self.separator.join(fields)


def as_text(data: bytes | None) -> str:
    """UTF-8 text; bytes that are not UTF-8 shown as `\\xNN` escapes (never evaluated); `null` for None."""
    if data is None:
        return "null"
    return bytes(data).decode("utf-8", errors="backslashreplace")


def _check_consume_options(args: argparse.Namespace) -> None:
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    if args.offset is not None and args.from_beginning:
        raise UsageError("--from-beginning and --offset cannot be used together")
    if args.group is not None and args.partition is not None:
        raise UsageError("--group and --partition cannot be used together")
    if args.group == "":
        raise UsageError("--group must not be empty")


def run_consume(args: argparse.Namespace) -> int:
    _check_consume_options(args)
    connect(args.address)
    # Ray (through the actors): loaded only when a command runs, so the CLI starts fast.
    from actors.clients.consumer import Consumer

    # With a group, the consumer auto-commits its positions, which never run ahead of what was printed
    # (each poll asks for at most what is still to print), and commits once more on close.
    consumer = Consumer(
        group_id=args.group,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=args.group is not None,
    )
    layout = RecordFormat(
        args.print_timestamp, args.print_partition, args.print_offset, args.print_key, args.key_separator
    )
    printed = 0

    def write(record: ConsumerRecord) -> None:
        nonlocal printed
        print(layout.render(record))
        printed += 1

    interrupted = threading.Event()
    try:
        with set_on_interrupt(interrupted):
            _assign(consumer, args)
            _poll_until_done(consumer, write, args.max_messages, args.timeout_ms, interrupted)
    finally:
        consumer.close()
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    if interrupted.is_set():
        raise KeyboardInterrupt
    return EXIT_OK


def _assign(consumer: Consumer, args: argparse.Namespace) -> None:
    if args.partition is None:
        consumer.subscribe([args.topic])
        return
    tp = (args.topic, args.partition)
    consumer.assign([tp])
    start: str | int = args.offset if args.offset is not None else ("earliest" if args.from_beginning else "latest")
    if start == "earliest":
        consumer.seek_to_beginning([tp])
    elif start == "latest":
        consumer.seek_to_end([tp])
    else:
        consumer.seek(tp, int(start))


def _poll_until_done(
    consumer: Consumer,
    write: Callable[[ConsumerRecord], None],
    max_messages: int | None,
    timeout_ms: int | None,
    interrupted: threading.Event,
) -> None:
    """Polls until `max_messages` are written, with `timeout_ms` nothing came for that long, or `interrupted` is set
    (checked between polls, so Ctrl-C ends the command within one poll's wait)."""
    written = 0
    idle_since = time.monotonic()
    while (max_messages is None or written < max_messages) and not interrupted.is_set():
        wait_ms = POLL_TIMEOUT_MS
        if timeout_ms is not None:
            remaining_ms = timeout_ms - (time.monotonic() - idle_since) * 1000
            wait_ms = max(0, min(POLL_TIMEOUT_MS, int(remaining_ms)))
        limit = None if max_messages is None else max_messages - written
        records = consumer.poll(timeout_ms=wait_ms, max_records=limit)
        for record in records:
            write(record)
        if records:
            sys.stdout.flush()
            written += len(records)
            idle_since = time.monotonic()
        elif timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
            return
