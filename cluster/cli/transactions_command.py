"""`raybroker transactions`, modelled on kafka-transactions.sh: `--list`, `--describe --transactional-id ID` and
`--abort`.

`--list` prints Kafka's table (`TransactionalId ProducerId TransactionState`, plus the tool's coordinator column,
always this cluster's one coordinator, id 0), optionally filtered by `--state` names and `--producer-id`.
`--describe` prints one id's producer id and epoch, state, timeout, start time, how long the transaction has run
and its partitions; an unknown id is an error (exit 1), as TRANSACTIONAL_ID_NOT_FOUND is for Kafka's tool.
`--abort` ends a hanging transaction (one whose records hold a partition's last stable offset back while its
coordinator no longer knows it) as kafka-transactions.sh's `abort` does, by writing an ABORT marker on the
partition's leader: `--topic T --partition P --start-offset O` finds the producer whose open transaction starts at
O (DescribeProducers), or `--producer-id`, `--producer-epoch` and `--coordinator-epoch` name it. With
`--bootstrap-server HOST:PORT` it speaks Kafka's protocol to that broker instead of going through the Ray cluster, as
kafka-transactions.sh does, so it works on raybroker's listener and on Apache Kafka alike
(`cluster.cli.wire_transactions`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from cluster.cli.command_support import EXIT_OK, UsageError, add_actions, add_command, connect, non_negative_int
from storage.errors import RaybrokerError

# raybroker runs one transaction coordinator for the cluster; Kafka's tool prints the coordinator's broker id.
COORDINATOR_ID = 0
LIST_HEADER = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADER = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "CurrentTransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)


def add_commands(subcommands: Any) -> None:
    command = add_command(
        subcommands,
        "transactions",
        "list and describe transactional ids like kafka-transactions.sh",
        "List and describe the transactional ids of Kafka clients' transactional producers, like "
        "kafka-transactions.sh: their producer id and epoch, transaction state, timeout and partitions.",
    )
    add_actions(
        command,
        (
            ("list", "list transactional ids"),
            ("describe", "describe --transactional-id"),
            (
                "abort",
                "abort a hanging transaction of --topic/--partition: by --start-offset, or by --producer-id, "
                "--producer-epoch and --coordinator-epoch",
            ),
        ),
    )
    command.add_argument("--transactional-id", metavar="ID", help="--describe: the transactional id")
    command.add_argument("--state", action="append", default=[], metavar="S", help="--list: only this state")
    command.add_argument(
        "--producer-id",
        action="append",
        default=[],
        type=non_negative_int,
        metavar="P",
        help="--list: only this id; --abort: the producer",
    )
    command.add_argument("--topic", metavar="T", help="--abort: the partition's topic")
    command.add_argument("--partition", type=non_negative_int, metavar="P", help="--abort: the partition")
    command.add_argument(
        "--start-offset", type=non_negative_int, metavar="O", help="--abort: where the open transaction starts"
    )
    command.add_argument("--producer-epoch", type=non_negative_int, metavar="E", help="--abort: the producer's epoch")
    command.add_argument(
        "--coordinator-epoch", type=int, metavar="C", help="--abort: the coordinator epoch of the producer's markers"
    )
    command.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="--abort: speak Kafka's protocol to this broker (raybroker's listener or any Kafka broker) instead of "
        "going through the Ray cluster",
    )
    command.set_defaults(handler=run_transactions)


def run_transactions(args: argparse.Namespace) -> int:
    if args.action == "describe" and not args.transactional_id:
        raise UsageError("--describe needs --transactional-id")
    if args.action == "list" and args.transactional_id:
        raise UsageError("--transactional-id goes with --describe")
    abort_options = (args.topic, args.partition, args.start_offset, args.producer_epoch, args.coordinator_epoch)
    if args.action != "abort" and any(option is not None for option in (*abort_options, args.bootstrap_server)):
        raise UsageError(
            "--topic, --partition, --start-offset, --producer-epoch, --coordinator-epoch and --bootstrap-server go "
            "with --abort"
        )
    if args.action == "abort":
        return _abort(args)
    connect(args.address)
    # Ray (through the actors): loaded only when a command runs, so the CLI starts fast.
    from actors.clients.transactions_admin import Transactions

    transactions = Transactions()
    if args.action == "list":
        rows = [
            (found.transactional_id, str(COORDINATOR_ID), str(found.producer_id), found.state)
            for found in transactions.list_transactions(args.state, args.producer_id)
        ]
        _print_table(LIST_HEADER, rows)
        return EXIT_OK
    found = transactions.describe(args.transactional_id)
    if found is None:
        raise RaybrokerError(f"transactional id {args.transactional_id!r} is not known to the coordinator")
    running = found.start_ms >= 0 and found.state not in ("Empty", "CompleteCommit", "CompleteAbort")
    duration = str(int(time.time() * 1000) - found.start_ms) if running else "None"
    row = (
        str(COORDINATOR_ID),
        found.transactional_id,
        str(found.producer_id),
        str(found.producer_epoch),
        found.state,
        str(found.timeout_ms),
        str(found.start_ms) if running else "None",
        duration,
        ",".join(f"{topic}-{partition}" for topic, partition in found.partitions),
    )
    _print_table(DESCRIBE_HEADER, [row])
    return EXIT_OK


def _abort(args: argparse.Namespace) -> int:
    if args.topic is None or args.partition is None:
        raise UsageError("--abort needs --topic and --partition")
    if args.start_offset is not None:
        if args.producer_id or args.producer_epoch is not None or args.coordinator_epoch is not None:
            raise UsageError("--abort takes --start-offset, or --producer-id/--producer-epoch/--coordinator-epoch")
    elif len(args.producer_id) != 1 or args.producer_epoch is None or args.coordinator_epoch is None:
        raise UsageError(
            "--abort needs --start-offset, or one --producer-id with --producer-epoch and --coordinator-epoch"
        )
    named = vars(args)
    producer = None if args.start_offset is not None else (int(named["producer_id"][0]), int(named["producer_epoch"]))
    if args.bootstrap_server is not None:
        # The protocol client (kio's schemas, ~0.6 s to import): loaded only when a command speaks the protocol.
        from cluster.cli.wire_transactions import abort_transaction

        producer_id, epoch, coordinator_epoch = abort_transaction(
            args.bootstrap_server, args.topic, args.partition, args.start_offset, producer, args.coordinator_epoch
        )
    else:
        producer_id, epoch, coordinator_epoch = _abort_through_ray(args, producer)
    print(
        f"Aborted the transaction of producer id {producer_id} (epoch {epoch}, coordinator epoch "
        f"{coordinator_epoch}) on {args.topic}-{args.partition}"
    )
    return EXIT_OK


def _abort_through_ray(args: argparse.Namespace, producer: tuple[int, int] | None) -> tuple[int, int, int]:
    """The ABORT marker written through the Ray cluster's partition actors; (producer id, epoch, coordinator epoch)."""
    connect(args.address)
    from actors.clients.transactions_admin import Transactions

    transactions = Transactions()
    if producer is None:
        found = transactions.open_transaction_at(args.topic, args.partition, args.start_offset)
        producer_id, epoch, coordinator_epoch = found.producer_id, found.producer_epoch, found.coordinator_epoch
    else:
        (producer_id, epoch), coordinator_epoch = producer, args.coordinator_epoch
    transactions.abort_transaction(args.topic, args.partition, producer_id, epoch, coordinator_epoch)
    return producer_id, epoch, coordinator_epoch


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    for line in (header, *rows):
        print("\t".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
