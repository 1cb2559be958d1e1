"""One round of a topic's translation into its Iceberg table (`key_value` mode), exactly once.

A round:
1. reads the table's offsets: the `raybroker.offsets` property of its current snapshot's summary, each partition's
   next offset to translate as JSON (`{"0": 1200, "1": 980}`); a partition it does not name starts at the log
   start;
2. plans a read_committed read from there to each partition's last stable offset (`cluster.records.read_plan`:
   the end offsets are fixed, records of aborted transactions are dropped, open transactions hold the end back);
3. writes the planned records as Parquet data files, one Ray task per node leading partitions, each reading its
   ranges (`cluster.records.range_reading`, told the leaders' nodes) and writing them with pyiceberg's own writer,
   which splits rows by the partition spec and records the files' statistics
   (`pyiceberg.io.pyarrow._dataframe_to_data_files`, what pyiceberg 0.12's `Table.append` runs; private, hence the
   exact pin). Where the tasks run depends on the warehouse:
   - an object store (`s3://`, `gs://`, ...), which every node reaches: on the leader's node (soft affinity: a node
     gone runs it elsewhere, fetching through the actors), so the records are read from the segment files there;
   - a local one (`file://` or a path without a scheme, `is_local_warehouse`): on the committer's node (hard
     affinity), as a file written on another machine's disk is one the committer and every reader on this node
     cannot see; the records then come over Ray from the leaders' nodes;
4. commits every file in ONE Iceberg append, the one committer of the table, whose snapshot summary carries every
   partition's planned end offset.

Why it is exactly once: the rows of a file and the offsets they advance land in the same atomic commit, and the
commit asserts that the table's current snapshot is still the one whose offsets the round started from (pyiceberg's
`AssertRefSnapshotId` on `main`). A crash after writing files but before the commit leaves files no snapshot
names, which the next round ignores (it starts from the same offsets and writes new files: orphans, for Iceberg's
`remove_orphan_files` to collect); a crash after the commit leaves the new offsets, which the next round starts
from; a second committer that raced ahead makes this commit fail (`IcebergCatalogError`), and the next round
starts from its offsets. Records that retention or DeleteRecords removed before they were translated are skipped
(they are gone from the log), with a warning.

In the value modes (`cluster.iceberg.value_table`) a round also writes the records whose value does not fit to the
dead-letter table `<table>_dlq`, which carries offsets in its summary the same way. Iceberg commits one table at a
time, so the dead letters are committed first (when there are any), then the table: a crash between the two leaves
the dead-letter table ahead, and the next round, which starts from the table's offsets, drops the dead letters below
the dead-letter table's own offsets, which are already in it. Each record lands once, in one of the two tables.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import ray
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.clients.broker import Broker
from cluster.iceberg.key_value_table import table_rows
from cluster.iceberg.value_table import ValueRows
from cluster.records.isolation import READ_COMMITTED
from cluster.records.offset_ranges import OffsetRange, partitions_of
from cluster.records.range_reading import read_ranges
from cluster.records.read_plan import EARLIEST, LATEST, Dialect, PlanRequest, TopicReadPlan, plan_partitions
from storage.errors import IcebergCatalogError, InvalidRequestError

logger = logging.getLogger(__name__)

# The snapshot summary property holding each partition's next offset to translate.
OFFSETS_PROPERTY = "raybroker.offsets"
_DIALECT = Dialect(
    start="table offset",
    end="last stable offset",
    skip_lost="Records deleted before they were translated are skipped.",
    past_end_error=InvalidRequestError,
)


@dataclass(frozen=True)
class PreparedRound:
    """What a round wrote and will commit: the snapshot its offsets came from (None: an empty table), every
    partition's offsets before and after it, and its data files (already in the warehouse, in no snapshot yet); in
    the value modes, its dead-letter files too and the dead-letter table's snapshot they go on."""

    topic: str
    base_snapshot_id: int | None
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    data_files: tuple[DataFile, ...]
    dead_letter_files: tuple[DataFile, ...] = ()
    dead_letter_base_snapshot_id: int | None = None

    @property
    def dead_letters(self) -> int:
        return sum(data_file.record_count for data_file in self.dead_letter_files)

    @property
    def rows(self) -> int:
        return sum(data_file.record_count for data_file in self.data_files)

    @property
    def size_bytes(self) -> int:
        return sum(data_file.file_size_in_bytes for data_file in (*self.data_files, *self.dead_letter_files))

    @property
    def advances(self) -> bool:
        """Whether committing moves the table's offsets (a round with nothing new commits nothing)."""
        return self.end_offsets != self.start_offsets


def table_offsets(table: Table) -> dict[int, int]:
    """Each partition's next offset to translate, from the current snapshot's summary ({} for an empty table).

    Raises `IcebergCatalogError` for a summary that is not raybroker's (a table some other writer made)."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return {}
    text = snapshot.summary.additional_properties.get(OFFSETS_PROPERTY)
    if text is None:
        raise IcebergCatalogError(
            f"table {table.name()} has snapshot {snapshot.snapshot_id} without {OFFSETS_PROPERTY}"
        )
    try:
        offsets = {int(partition): int(offset) for partition, offset in json.loads(text).items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise IcebergCatalogError(f"table {table.name()}: unreadable {OFFSETS_PROPERTY} {text!r}") from exc
    return offsets


def prepare_round(
    topic: str,
    table: Table,
    broker: Broker,
    values: ValueRows | None = None,
    dead_letters: Table | None = None,
) -> PreparedRound:
    """Steps 1-3 of a round (see the module docstring): the data files of the committed records past the table's
    offsets, written but not committed. `values` and `dead_letters` (the value modes, both or neither): how values
    become rows, and the dead-letter table."""
    if (values is None) != (dead_letters is None):
        raise ValueError("the value modes take both values and dead_letters, key_value neither")
    dead_letter_snapshot = None if dead_letters is None else dead_letters.current_snapshot()
    dead_letter_offsets = {} if dead_letters is None else table_offsets(dead_letters)
    snapshot = table.current_snapshot()
    start_offsets = table_offsets(table)
    tps = partitions_of(broker, [topic])
    request = PlanRequest(
        start={tp: start_offsets.get(tp[1], EARLIEST) for tp in tps},
        end={tp: LATEST for tp in tps},
        isolation=READ_COMMITTED,
        fail_on_data_loss=False,
        dialect=_DIALECT,
    )
    plan = plan_partitions(request, broker)
    _warn_of_skipped_records(topic, start_offsets, plan)
    end_offsets = {**start_offsets, **{tp[1]: offset for tp, offset in plan.end_offsets.items()}}
    local = is_local_warehouse(table.metadata.location)
    committer_node = ray.get_runtime_context().get_node_id()
    pending = [
        _write_data_files.options(
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(committer_node if local else node, soft=not local),
        ).remote(
            [planned.range for planned in ranges],
            node,
            table.metadata,
            dict(table.io.properties),
            values,
            None if dead_letters is None else dead_letters.metadata,
            dead_letter_offsets,
        )
        for node, ranges in plan.by_node().items()
    ]
    written = ray.get(pending)
    return PreparedRound(
        topic,
        None if snapshot is None else snapshot.snapshot_id,
        start_offsets,
        end_offsets,
        tuple(data_file for files, _ in written for data_file in files),
        tuple(data_file for _, files in written for data_file in files),
        None if dead_letter_snapshot is None else dead_letter_snapshot.snapshot_id,
    )


def is_local_warehouse(location: str) -> bool:
    """Whether a table location is on a node's own disk (`file://`, or a path without a scheme) rather than in an
    object store every node reaches."""
    return urlparse(location).scheme in ("", "file")


def commit_round(table: Table, prepared: PreparedRound, dead_letters: Table | None = None) -> int | None:
    """Step 4: appends the round's files in one commit whose summary carries its end offsets (after its dead
    letters' commit to `dead_letters`, when it has any); the table's new snapshot id (None when the round had nothing
    to commit). The tables must be the ones the round was prepared from.

    Raises `IcebergCatalogError` when a table moved since (another committer) or the catalog refused."""
    if not prepared.advances:
        return None
    if prepared.dead_letter_files:
        if dead_letters is None:
            raise ValueError("a round with dead letters commits them to its dead-letter table")
        _append(dead_letters, prepared.dead_letter_base_snapshot_id, prepared.dead_letter_files, prepared)
    return _append(table, prepared.base_snapshot_id, prepared.data_files, prepared)


def _append(table: Table, base_snapshot_id: int | None, files: Sequence[DataFile], prepared: PreparedRound) -> int:
    """One commit of `files` whose summary carries the round's end offsets, if the table is still at
    `base_snapshot_id`."""
    current = table.current_snapshot()
    if (None if current is None else current.snapshot_id) != base_snapshot_id:
        raise IcebergCatalogError(f"table {table.name()} moved since the round of {prepared.topic} was prepared")
    offsets = {str(partition): offset for partition, offset in sorted(prepared.end_offsets.items())}
    try:
        with table.transaction() as transaction:
            update = transaction.update_snapshot(snapshot_properties={OFFSETS_PROPERTY: json.dumps(offsets)})
            with update.fast_append() as append:
                for data_file in files:
                    append.append_data_file(data_file)
    except CommitFailedException as exc:
        raise IcebergCatalogError(f"commit to {table.name()} refused: {exc}") from exc
    committed = table.current_snapshot()
    if committed is None:
        raise IcebergCatalogError(f"table {table.name()} has no snapshot after a commit")
    return committed.snapshot_id


def translate_once(
    topic: str, table: Table, broker: Broker, values: ValueRows | None = None, dead_letters: Table | None = None
) -> PreparedRound:
    """A whole round (see the module docstring); what it committed."""
    prepared = prepare_round(topic, table, broker, values, dead_letters)
    commit_round(table, prepared, dead_letters)
    return prepared


@ray.remote(num_cpus=0)
def _write_data_files(
    ranges: Sequence[OffsetRange],
    node: str,
    metadata: TableMetadata,
    io_properties: Mapping[str, str],
    values: ValueRows | None,
    dead_letter_metadata: TableMetadata | None,
    dead_letter_offsets: Mapping[int, int],
) -> tuple[list[DataFile], list[DataFile]]:
    """The ranges' records read (read_committed) and written as the table's data files (`_dataframe_to_data_files`
    splits them by the partition spec); in the value modes, the dead letters not already in the dead-letter table
    (below its offsets) written as its files."""
    decoded = list(
        read_ranges(
            ranges,
            fail_on_data_loss=False,
            include_headers=True,
            node_ids=[node] * len(ranges),
            isolation=READ_COMMITTED,
        )
    )
    if values is None or dead_letter_metadata is None:
        return _data_files(metadata, io_properties, [table_rows(batch) for batch in decoded]), []
    rows, dead = [], []
    for batch in decoded:
        kept, dead_letters = values.split(batch)
        rows.append(kept)
        dead.append(_past(dead_letters, dead_letter_offsets))
    return _data_files(metadata, io_properties, rows), _data_files(dead_letter_metadata, io_properties, dead)


def _past(batch: pa.RecordBatch, offsets: Mapping[int, int]) -> pa.RecordBatch:
    """The rows of `batch` at or past their partition's offset in `offsets` (all of them for a partition absent)."""
    if not offsets or batch.num_rows == 0:
        return batch
    keep = [
        offset >= offsets.get(partition, 0)
        for partition, offset in zip(
            batch.column("partition").to_pylist(), batch.column("offset").to_pylist(), strict=True
        )
    ]
    return batch.filter(pa.array(keep, type=pa.bool_()))


def _data_files(
    metadata: TableMetadata, io_properties: Mapping[str, str], batches: list[pa.RecordBatch]
) -> list[DataFile]:
    batches = [batch for batch in batches if batch.num_rows]
    if not batches:
        return []
    io = load_file_io(dict(io_properties), metadata.location)
    rows: Any = pa.Table.from_batches(batches)
    return list(_dataframe_to_data_files(metadata, rows, io, write_uuid=uuid.uuid4()))


def _warn_of_skipped_records(topic: str, start_offsets: Mapping[int, int], plan: TopicReadPlan) -> None:
    for (_, partition), start in plan.start_offsets.items():
        wanted = start_offsets.get(partition)
        if wanted is not None and start > wanted:
            logger.warning(
                "%s-%d: offsets %d to %d were deleted before they were translated into the Iceberg table",
                topic,
                partition,
                wanted,
                start - 1,
            )
