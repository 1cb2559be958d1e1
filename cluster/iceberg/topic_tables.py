"""Which snapshot of each topic's Iceberg table a read over table and log takes, and the files it holds: what Ray
Data's `read_topic(..., history="table")` and the Spark bridge's `read_topics(..., history="table")` share.

A topic kept as a `key_value` table (`iceberg.mode`) has its committed records up to the offsets its current
snapshot's summary names (`cluster.iceberg.translation.table_offsets`); a read over table and log takes that
snapshot and the log from those offsets on. A topic whose table has no snapshot yet is left out (read from its log
alone); one not kept as a `key_value` table is refused with `InvalidRequestError` (the other modes' tables hold
parsed columns, not records).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from actors.calls import call
from actors.clients.broker import Broker
from cluster.iceberg.catalog import open_catalog
from cluster.iceberg.translation import table_offsets
from storage.config.iceberg_topic_config import table_identifier
from storage.config.log_config import LogConfig
from storage.errors import InvalidRequestError

KEY_VALUE = "key_value"


class TableSnapshot(NamedTuple):
    """A topic's table at the snapshot a read takes: the table's identifier (`namespace.table`), the snapshot's id,
    the offset of each partition up to which the table holds its records, and the table as loaded."""

    identifier: str
    snapshot_id: int
    offsets: dict[int, int]
    table: Table


def table_snapshots(topics: Sequence[str], properties: Mapping[str, str]) -> dict[str, TableSnapshot]:
    """Each topic's table at its current snapshot, through the catalog of `properties` (see the module docstring)."""
    configs: dict[str, dict[str, str]] = call(Broker.connect().controller.topic_configs.remote())
    catalog = open_catalog(properties)
    snapshots = {}
    for topic in topics:
        config = LogConfig.from_properties(configs.get(topic, {}))
        if config.iceberg_mode != KEY_VALUE:
            raise InvalidRequestError(
                f"history='table' reads topics kept as key_value Iceberg tables; {topic!r} has "
                f"iceberg.mode={config.iceberg_mode}"
            )
        identifier = table_identifier(config.iceberg_table, topic)
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            continue
        snapshot = table.current_snapshot()
        if snapshot is not None:
            snapshots[topic] = TableSnapshot(".".join(identifier), snapshot.snapshot_id, table_offsets(table), table)
    return snapshots


def snapshot_data_files(snapshot: TableSnapshot) -> list[str]:
    """The data files of the table at `snapshot` (their locations, as the catalog's warehouse names them). A
    `key_value` table is only appended to, so its rows are exactly its data files' rows."""
    return [task.file.file_path for task in snapshot.table.scan(snapshot_id=snapshot.snapshot_id).plan_files()]
