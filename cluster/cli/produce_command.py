"""`raybroker produce`, modelled on kafka-console-producer.sh: one record per stdin line.

Lines are sent as read (bytes, without their line ending); with `--key-separator` each line is KEY<SEP>VALUE,
split at the first separator, and a line without it is an error. Records are batched by the idempotent producer
and all acknowledged before the command ends; a one-line count goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import EXIT_OK, UsageError, add_command, connect, non_negative_int
from storage.errors import RaybrokerError

if TYPE_CHECKING:
    from actors.clients.producer import RecordMetadata

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")


def add_commands(subcommands: Any) -> None:
    produce = add_command(
        subcommands,
        "produce",
        "send stdin lines as records like kafka-console-producer.sh",
        "Read lines from stdin and send each as one record (the line ending is not part of it; bytes are sent "
        "as read). With --key-separator, each line is KEY<SEP>VALUE, split at the first separator, and a line "
        "without it is an error. Records are batched, idempotent, and all acknowledged before the command ends; "
        "a one-line count goes to stderr.",
    )
    produce.add_argument("--topic", required=True, metavar="T", help="the topic")
    produce.add_argument("--key-separator", metavar="SEP", default=None, help="split each line into key and value")
    produce.add_argument(
        "--compression", choices=COMPRESSION_TYPES, default="none", help="batch compression (default: none)"
    )
    produce.add_argument(
        "--partition",
        type=non_negative_int,
        metavar="P",
        help="send every record to this partition (default: by key hash; unkeyed records stick to a partition "
        "per batch)",
    )
    produce.set_defaults(handler=run_produce)


class _DeliveryTally:
    """Counts acknowledged and failed records from the producer's callbacks; keeps the first error only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.delivered = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def __call__(self, future: Future[RecordMetadata]) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.delivered += 1
                return
            self.failed += 1
            if self.first_error is None:
                self.first_error = error


def _input_lines() -> Iterator[bytes]:
    """stdin's lines without their line ending (\\n, \\r\\n), as bytes: read raw when stdin has a buffer."""
    raw = getattr(sys.stdin, "buffer", None)
    lines: Iterator[bytes] = iter(raw) if raw is not None else (text.encode("utf-8") for text in sys.stdin)
    for line in lines:
        if line.endswith(b"\n"):
            line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
        yield line


def run_produce(args: argparse.Namespace) -> int:
    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    connect(args.address)
    # Ray (through the actors): loaded only when a command runs, so the CLI starts fast.
    from actors.clients.broker import Broker
    from actors.clients.producer import Producer

    broker = Broker.connect()
    if args.partition is None:
        broker.topic(args.topic)
    else:
        broker.partition(args.topic, args.partition)
    separator = None if args.key_separator is None else args.key_separator.encode("utf-8")
    tally = _DeliveryTally()
    sent = 0
    producer = Producer(broker, compression_type=args.compression)
    try:
        for number, line in enumerate(_input_lines(), start=1):
            key: bytes | None = None
            value = line
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    raise RaybrokerError(f"line {number}: no key separator {args.key_separator!r} found")
            try:
                future = producer.send(args.topic, value=value, key=key, partition=args.partition)
            except RaybrokerError as exc:
                raise RaybrokerError(f"line {number}: {type(exc).__name__}: {exc}") from exc
            future.add_done_callback(tally)
            sent += 1
    finally:
        producer.close()
    if tally.first_error is not None:
        raise RaybrokerError(
            f"{tally.failed} of {sent} records were not written to {args.topic}; the first failed with "
            f"{type(tally.first_error).__name__}: {tally.first_error}"
        ) from tally.first_error
    print(f"Produced {tally.delivered} records to {args.topic}.", file=sys.stderr)
    return EXIT_OK
