"""`raybroker iceberg --describe [--topic T]`: the topics kept as Iceberg tables, as the cluster's translation
driver (`cluster.iceberg.translation_driver_actor`) sees them now.

Per topic, a header line `Topic: T  Table: ns.table  Mode: key_value  Snapshot: 123...  State: translating` (or
`State: paused (reason)`: the catalog or warehouse could not be reached, the round is tried again every
`iceberg.target.lag.ms`), then the table `PARTITION TABLE-OFFSET LAST-STABLE-OFFSET LAG` (the table's next offset to
translate, the log's last stable offset, and the offsets between). No topic translated prints "No topic is kept as
an Iceberg table."; `--topic T` of a topic not translated (unknown, or `iceberg.mode=off`) is an error (exit 1), as
is a cluster whose driver does not run (a broker started without `raybroker start`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import (
    EXIT_DATA_ERROR,
    EXIT_OK,
    add_actions,
    add_command,
    connect,
    print_error,
    table_lines,
)

if TYPE_CHECKING:
    from cluster.iceberg.translation_driver import TopicStatus

PARTITIONS_HEADER = ("PARTITION", "TABLE-OFFSET", "LAST-STABLE-OFFSET", "LAG")
# The snapshot of a table nothing was committed to yet.
NO_SNAPSHOT = "-"


def add_commands(subcommands: Any) -> None:
    command = add_command(
        subcommands,
        "iceberg",
        "describe the topics kept as Iceberg tables: table, snapshot, state, lag per partition",
        "Describe the topics kept as Iceberg tables (topic config iceberg.mode): each one's table, current "
        "snapshot, translation state (translating, or paused with the reason) and, per partition, the table's "
        "offset, the log's last stable offset and the lag between.",
    )
    add_actions(command, (("describe", "describe every translated topic, or --topic's"),))
    command.add_argument("--topic", metavar="T", default=None, help="only this topic")
    command.set_defaults(handler=run_iceberg)


def run_iceberg(args: argparse.Namespace) -> int:
    connect(args.address)
    # Ray and pyiceberg (through the driver's module): loaded only when the command runs, so the CLI starts fast.
    from cluster.iceberg.translation_driver_actor import iceberg_driver_status

    statuses = iceberg_driver_status(args.topic)
    if args.topic is not None and not statuses:
        print_error(f"topic {args.topic!r} is not kept as an Iceberg table (no such topic, or iceberg.mode=off)")
        return EXIT_DATA_ERROR
    if not statuses:
        print("No topic is kept as an Iceberg table.")
    for index, status in enumerate(statuses):
        if index:
            print()
        print("\n".join(describe_lines(status)))
    return EXIT_OK


def describe_lines(status: TopicStatus) -> list[str]:
    """One topic's header line and partition table (see the module docstring)."""
    state = status.state if not status.reason else f"{status.state} ({status.reason})"
    snapshot = NO_SNAPSHOT if status.snapshot_id is None else str(status.snapshot_id)
    header = f"Topic: {status.topic}\tTable: {status.table}\tMode: {status.mode}\tSnapshot: {snapshot}\tState: {state}"
    rows = [(str(p.partition), str(p.table_offset), str(p.last_stable_offset), str(p.lag)) for p in status.partitions]
    return [header, *table_lines(PARTITIONS_HEADER, rows)]
