"""The read tasks inside Spark's Python workers: `read_task` is the `mapInArrow` function of a read.

`cluster.spark.kafka_source` builds the DataFrame: its input rows are task numbers (`spark.range`), and each task
attaches its worker to Ray once (`cluster.spark.worker`) and reads its ranges with `cluster.records.range_reading`
(fetches from the partition actors or the segment files on this node, decoded into Arrow record batches in Spark's
Kafka-source schema, never Python rows), decoding msgpack values in Python when asked. The topic column leaves
Python as a 4-byte index into the plan's topics. The plan's isolation level decides the rest
(`cluster.records.isolation`; `read_committed` unless the read asked otherwise): records of aborted transactions
are dropped, or at `read_uncommitted` read too; control batches never are. Measured with
1 executor x 2 cores and other jobs running (load 20-50): 1M records of ~80 B (8 partitions) through Spark into a
`groupBy(partition)` count and sums 0.9-1.1 s with 2 tasks, 1.1-2.0 s with 4.

Importing this module loads the whole read path (numpy, pyarrow, the record decoders, the value decoders), which
is why the session's warm-up job runs `warm_up_task` from here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from cluster.records.offset_ranges import OffsetRange
from cluster.records.range_reading import read_ranges
from cluster.records.value_formats import ArrowValueDecoder
from cluster.spark.worker import attach_worker_to_ray, keep_zip_directories


def read_task(
    tasks: tuple[tuple[OffsetRange, ...], ...],
    topics: tuple[str, ...],
    topic_column: str,
    address: str,
    fail_on_data_loss: bool,
    include_headers: bool,
    decoder: ArrowValueDecoder | None,
    isolation: str,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function: its input rows are task numbers (`spark.range`); the topic column of its output
    holds the topic's index in `topics` (`cluster.spark.kafka_source` turns it back into the name in the JVM)."""
    attach_worker_to_ray(address)
    keep_zip_directories()
    index_field = pa.field(topic_column, pa.int32())
    topic_names = pa.array(topics, type=pa.string())
    for batch in batches:
        for task in batch.column(0).to_pylist():
            for records in read_ranges(
                tasks[task], fail_on_data_loss=fail_on_data_loss, include_headers=include_headers, isolation=isolation
            ):
                output = records if decoder is None else decoder.assemble(records)
                position = output.schema.get_field_index(topic_column)
                indexes = pc.index_in(records.column("topic"), value_set=topic_names)
                yield output.set_column(position, index_field, indexes)


def warm_up_task(address: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The session's warm-up job (`cluster.spark.session.warm_up_workers`): attaches this worker to Ray, and,
    being defined here, makes the worker import the read path now instead of in the first read."""
    attach_worker_to_ray(address)
    yield from batches
