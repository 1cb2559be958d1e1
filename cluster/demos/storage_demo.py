"""`raybroker storage-demo`: storage only, one partition log on local disk, written, rolled and read back.

Steps (each prints a progress line; the whole run takes a few milliseconds and starts no Ray):

1. open `<dir>/demo-0` as a Log with `segment.bytes` = 600, so the five batches below roll the log on size;
2. append one batch per codec (none, gzip, snappy, lz4, zstd), three records each with headers, plus a batch
   with a null key, an empty value and a null value (a tombstone);
3. roll by hand, so the newest segment is empty, as after a `segment.ms` roll;
4. read every record back from offset 0 and print it;
5. close the log (trims indexes, writes `.kafka_cleanshutdown`), list the files, and dump the first segment's
   `.log` the way `raybroker dump-log` does.

The directory is kept so the files can be inspected afterwards. `raybroker demo` (`cluster.demos.broker_demo`)
runs the broker on Ray and Spark over it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TextIO

from storage.clock import SYSTEM_CLOCK, Clock
from storage.config.log_config import LogConfig
from storage.dump_log import DumpOptions, FileDump, classify
from storage.file_names import log_file, partition_dir_name
from storage.partition.log import Log
from storage.records.compression import CompressionType
from storage.records.record_batch import Header, RecordBatchBuilder

DEMO_TOPIC = "demo"
DEMO_PARTITION = 0
# A batch of three small records is 100-150 bytes whatever the codec, so 600 bytes holds four or five of them and
# the five codec batches roll the log once on size.
DEMO_SEGMENT_BYTES = 600
RECORDS_PER_BATCH = 3
STEPS = 5


def _step(out: TextIO, number: int, message: str) -> None:
    print(f"[{number}/{STEPS}] {message}", file=out, flush=True)


def _show(value: bytes | None) -> str:
    return "null" if value is None else repr(value.decode("utf-8", errors="replace"))


def _codec_batch(codec: CompressionType, clock: Clock) -> bytes:
    builder = RecordBatchBuilder(compression=codec)
    for index in range(RECORDS_PER_BATCH):
        headers: list[Header] = [("codec", codec.kafka_name.encode()), ("index", str(index).encode())]
        builder.append(
            f"user-{index}".encode(),
            f"{codec.kafka_name} record {index}".encode(),
            timestamp=clock.milliseconds(),
            headers=headers,
        )
    return builder.build()


def _edge_case_batch(clock: Clock) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(None, b"no key", timestamp=clock.milliseconds())
    builder.append(b"empty", b"", timestamp=clock.milliseconds())
    builder.append(b"user-0", None, timestamp=clock.milliseconds(), headers=[("tombstone", None)])
    return builder.build()


def run_storage_demo(directory: Path | None = None, out: TextIO = sys.stdout, clock: Clock = SYSTEM_CLOCK) -> int:
    """Runs the demo in `directory` (default: a new temporary directory, kept); returns the exit code 0."""
    root = Path(tempfile.mkdtemp(prefix="raybroker-demo-")) if directory is None else Path(directory)
    log_dir = root / partition_dir_name(DEMO_TOPIC, DEMO_PARTITION)
    config = LogConfig(segment_bytes=DEMO_SEGMENT_BYTES)
    _step(out, 1, f"opening partition log {log_dir} (segment.bytes={DEMO_SEGMENT_BYTES})")
    log = Log.open(log_dir, config, clock=clock)
    try:
        _step(out, 2, "appending one batch per codec, then null/empty keys and values")
        for codec in CompressionType:
            info = log.append(_codec_batch(codec, clock))
            print(
                f"      {codec.kafka_name:<6} offsets {info.first_offset}..{info.last_offset} "
                f"({info.valid_bytes} bytes) -> segment {log.active_segment.base_offset}",
                file=out,
            )
        info = log.append(_edge_case_batch(clock))
        print(
            f"      edge   offsets {info.first_offset}..{info.last_offset} "
            f"({info.valid_bytes} bytes) -> segment {log.active_segment.base_offset}",
            file=out,
        )
        rolled = log.roll()
        _step(out, 3, f"rolled by hand: new active segment {rolled.base_offset}, {log.num_segments} segments")
        _step(out, 4, f"reading back offsets {log.log_start_offset}..{log.log_end_offset - 1}")
        for record in log.records():
            headers = ", ".join(f"{key}={_show(value)}" for key, value in record.headers)
            print(
                f"      offset {record.offset:>2} key={_show(record.key)} value={_show(record.value)} "
                f"headers=[{headers}]",
                file=out,
            )
    finally:
        log.close()
    _step(out, 5, f"closed cleanly; files in {log_dir}:")
    for path in sorted(log_dir.iterdir()):
        print(f"      {path.name:<32} {path.stat().st_size:>6} bytes", file=out)
    first_log = log_file(log_dir, 0)
    info_first = classify(first_log)
    if info_first is not None:
        for line in FileDump(info_first, DumpOptions()).text_lines():
            print(f"      {line}", file=out)
    print(f"inspect them with: raybroker dump-log --print-data-log {log_dir}/*.log", file=out, flush=True)
    return 0
