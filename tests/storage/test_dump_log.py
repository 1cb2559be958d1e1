"""dump-log against independent oracles: kafka-python's decoders for batches, struct for index entries, the text of
checkpoint files, real Kafka log dirs; plus files damaged on purpose (truncated everywhere, CRC flips, garbage)."""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path

import crc32c
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from storage.dump_log import DumpOptions, FileDump, FileKind, classify
from storage.records.compression import CompressionType
from storage.records.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    set_base_offset_and_epoch,
    set_log_append_time,
)
from storage.segment.offset_index import OffsetIndex
from storage.segment.time_index import TimeIndex

LOG_NAME = "00000000000000000000.log"
TS = 1_700_000_000_000
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
SHALLOW = DumpOptions()
PRINT_DATA = DumpOptions(print_data_log=True)
WILLIAM = Path("William0423__kafka@499e39fa") / "kafka-logs"
ITUMELENG = Path("ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions@2f57540f") / "kafka-data"


# --- building files ----------------------------------------------------------------------------------


def assign_offsets(batches: list[bytes], leader_epoch: int = 4) -> bytes:
    """Concatenates client batches, giving them consecutive offsets from 0 as a broker does."""
    out = bytearray()
    next_offset = 0
    for batch in batches:
        start = len(out)
        out += batch
        set_base_offset_and_epoch(out, start, next_offset, leader_epoch)
        (last_offset_delta,) = struct.unpack_from(">i", out, start + ATTRIBUTES_OFFSET + 2)
        next_offset += last_offset_delta + 1
    return bytes(out)


def v2_batches() -> list[bytes]:
    """Every codec, headers, null and empty keys/values, a transactional batch whose sequence wraps, a COMMIT
    marker and a LogAppendTime batch."""
    batches = []
    for codec in CompressionType:
        builder = RecordBatchBuilder(compression=codec)
        builder.append(b"key", b"value", timestamp=TS, headers=[("h1", b"a"), ("h\u00e9", None)])
        builder.append(None, b"no key", timestamp=TS + 5)
        builder.append(b"", b"", timestamp=TS - 3, headers=[("empty", b"")])
        builder.append(b"tombstone", None, timestamp=TS + 1)
        batches.append(builder.build())
    txn = RecordBatchBuilder(
        compression=CompressionType.LZ4,
        producer_id=1000,
        producer_epoch=3,
        base_sequence=2**31 - 2,
        is_transactional=True,
    )
    for index in range(3):
        txn.append(b"t", str(index).encode(), timestamp=TS + index)
    batches.append(txn.build())
    batches.append(
        build_control_batch(
            ControlRecordType.COMMIT, timestamp=TS + 9, producer_id=1000, producer_epoch=3, coordinator_epoch=7
        )
    )
    append_time = bytearray(_single_record_batch())
    set_log_append_time(append_time, 0, len(append_time), TS + 500)
    batches.append(bytes(append_time))
    return batches


def _single_record_batch(codec: CompressionType = CompressionType.NONE) -> bytes:
    builder = RecordBatchBuilder(compression=codec, timestamp_type=TimestampType.CREATE_TIME)
    builder.append(b"k", b"v", timestamp=TS, headers=[("h1", b"1"), ("h2", b"2")])
    return builder.build()


def legacy_set(magic: int, codec: int, first_offset: int, count: int) -> bytes:
    """A magic 0/1 message set from kafka-python's builder, with offsets as a broker stores them."""
    compressed = codec != 0
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for index in range(count):
        # Magic 1 wrappers hold relative inner offsets; magic 0 wrappers and plain messages absolute ones.
        offset = index if compressed and magic == 1 else first_offset + index
        key = None if index == 1 else f"key-{index}".encode()
        value = None if index == 2 else f"value {index} of magic {magic}".encode()
        builder.append(offset, timestamp=TS + index, key=key, value=value)
    data = bytearray(builder.build())
    if compressed:
        # The wrapper's offset (outside its CRC) is the absolute offset of the last inner message.
        struct.pack_into(">q", data, 0, first_offset + count - 1)
    return bytes(data)


def legacy_log() -> bytes:
    parts = [
        legacy_set(0, 0, 0, 1),
        legacy_set(0, 0, 1, 1),
        legacy_set(0, 1, 2, 3),
        legacy_set(0, 2, 5, 3),
        legacy_set(1, 0, 8, 1),
        legacy_set(1, 1, 9, 3),
        legacy_set(1, 2, 12, 4),
        legacy_set(1, 3, 16, 3),
    ]
    return b"".join(parts)


def write(tmp_path: Path, data: bytes, name: str = LOG_NAME) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def dump(path: Path, options: DumpOptions = SHALLOW) -> tuple[list[dict[str, object]], bool]:
    """The JSON rows (parsed back from the JSON text), and whether the dump failed."""
    info = classify(path)
    assert info is not None
    file_dump = FileDump(info, options)
    return [json.loads(line) for line in file_dump.json_lines()], file_dump.failed


def text(path: Path, options: DumpOptions = SHALLOW) -> tuple[list[str], bool]:
    info = classify(path)
    assert info is not None
    file_dump = FileDump(info, options)
    return list(file_dump.text_lines()), file_dump.failed


# --- the oracle: kafka-python -------------------------------------------------------------------------


def _hex(data: bytes | None) -> str | None:
    return None if data is None else bytes(data).hex()


def kafka_python_rows(data: bytes, with_records: bool) -> list[dict[str, object]]:
    """What dump-log must print for `data`, as kafka-python decodes it (CRC, offsets, fields, records)."""
    rows: list[dict[str, object]] = []
    position = 0
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        valid = batch.validate_crc()  # kafka-python checks the CRC only before iterating
        inner = list(batch)
        if batch.magic == 2:
            row: dict[str, object] = {
                "baseOffset": batch.base_offset,
                "lastOffset": batch.last_offset,
                "count": batch.records_count,
                "position": position,
                "size": batch.size_in_bytes,
                "magic": 2,
                "compresscodec": CODEC_NAMES[batch.compression_type],
                "crc": batch.crc,
                "isvalid": valid,
                "isTransactional": batch.is_transactional,
                "isControl": batch.is_control_batch,
                "producerId": batch.producer_id,
                "producerEpoch": batch.producer_epoch,
                "baseSequence": batch.base_sequence,
                "lastSequence": batch.last_sequence,
                "partitionLeaderEpoch": batch.leader_epoch,
                "maxTimestamp": batch.max_timestamp,
                "timestampType": TIMESTAMP_TYPES[batch.timestamp_type],
                "deleteHorizonMs": None,
            }
        else:
            (stored_crc,) = struct.unpack_from(">I", data, position + 12)
            max_timestamp = -1 if batch.magic == 0 else struct.unpack_from(">q", data, position + 18)[0]
            (wrapper_offset,) = struct.unpack_from(">q", data, position)
            row = {
                "baseOffset": inner[0].offset,
                "lastOffset": wrapper_offset,
                "count": len(inner),
                "position": position,
                "size": batch.size_in_bytes,
                "magic": batch.magic,
                "compresscodec": CODEC_NAMES[batch.compression_type],
                "crc": stored_crc,
                "isvalid": valid,
                "isTransactional": False,
                "isControl": False,
                "producerId": -1,
                "producerEpoch": -1,
                "baseSequence": -1,
                "lastSequence": -1,
                "partitionLeaderEpoch": -1,
                "maxTimestamp": max_timestamp,
                "timestampType": "NoTimestampType" if batch.magic == 0 else TIMESTAMP_TYPES[batch.timestamp_type],
                "deleteHorizonMs": None,
            }
        if with_records:
            row["records"] = [
                {
                    "offset": record.offset,
                    "timestamp": -1 if record.timestamp is None else record.timestamp,
                    "key": _hex(record.key),
                    "value": _hex(record.value),
                    "headers": [{"key": key, "value": _hex(value)} for key, value in record.headers],
                }
                for record in inner
            ]
        rows.append(row)
        position += batch.size_in_bytes
    assert position == len(data), "the oracle must see whole batches only"
    return rows


def batch_boundaries(data: bytes) -> list[int]:
    """Start positions of every batch, and the end of the last one."""
    positions = [0]
    for row in kafka_python_rows(data, with_records=False):
        positions.append(int(row["position"]) + int(row["size"]))
    return positions


# --- batches -------------------------------------------------------------------------------------------


def test_v2_rows_match_kafka_python_for_every_codec_header_and_batch_kind(tmp_path: Path) -> None:
    data = assign_offsets(v2_batches())
    path = write(tmp_path, data)

    rows, failed = dump(path, PRINT_DATA)

    assert not failed
    assert rows == kafka_python_rows(data, with_records=True)
    assert [row["compresscodec"] for row in rows[:5]] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert rows[5]["lastSequence"] == 0  # 2**31 - 2 + 2 wraps past 2**31 - 1
    assert rows[6]["isControl"] and rows[6]["isTransactional"]
    assert rows[7]["timestampType"] == "LogAppendTime"
    assert rows[7]["records"][0]["timestamp"] == TS + 500


def test_legacy_magic_0_and_1_rows_match_kafka_python(tmp_path: Path) -> None:
    data = legacy_log()
    path = write(tmp_path, data)

    rows, failed = dump(path, PRINT_DATA)

    assert not failed
    assert rows == kafka_python_rows(data, with_records=True)
    assert [row["magic"] for row in rows] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [record["offset"] for row in rows for record in row["records"]] == list(range(19))


def test_legacy_rows_without_deep_iteration_still_give_base_offset_and_count(tmp_path: Path) -> None:
    data = legacy_log()

    rows, failed = dump(write(tmp_path, data))

    assert not failed
    assert rows == kafka_python_rows(data, with_records=False)


def test_mixed_magic_log_dumps_in_file_order(tmp_path: Path) -> None:
    data = legacy_log() + assign_offsets(v2_batches())
    rows, failed = dump(write(tmp_path, data), PRINT_DATA)
    assert not failed
    assert rows == kafka_python_rows(data, with_records=True)


def test_deep_iteration_without_data_gives_record_metadata_only(tmp_path: Path) -> None:
    data = assign_offsets(v2_batches())
    rows, failed = dump(write(tmp_path, data), DumpOptions(deep_iteration=True))
    assert not failed
    oracle = kafka_python_rows(data, with_records=True)
    transactional = rows[5]["records"]
    assert [record["sequence"] for record in transactional] == [2**31 - 2, 2**31 - 1, 0]
    for row, expected in zip(rows, oracle, strict=True):
        assert [(r["offset"], r["timestamp"]) for r in row["records"]] == [
            (r["offset"], r["timestamp"]) for r in expected["records"]
        ]
        assert [r["keySize"] for r in row["records"]] == [
            -1 if r["key"] is None else len(r["key"]) // 2 for r in expected["records"]
        ]
        assert [r["headerKeys"] for r in row["records"]] == [
            [h["key"] for h in r["headers"]] for r in expected["records"]
        ]


def test_without_deep_iteration_v2_rows_have_no_records(tmp_path: Path) -> None:
    data = assign_offsets(v2_batches())
    rows, failed = dump(write(tmp_path, data))
    assert not failed
    assert rows == kafka_python_rows(data, with_records=False)


def test_empty_log_has_no_rows(tmp_path: Path) -> None:
    rows, failed = dump(write(tmp_path, b""))
    assert (rows, failed) == ([], False)


# --- text ----------------------------------------------------------------------------------------------


def test_text_lines_mirror_kafka_dump_log(tmp_path: Path) -> None:
    data = assign_offsets([_single_record_batch()], leader_epoch=0)
    crc = MemoryRecords(data).next_batch().crc

    lines, failed = text(write(tmp_path, data), PRINT_DATA)

    assert not failed
    assert lines == [
        f"Dumping {tmp_path / LOG_NAME}",
        "Log starting offset: 0",
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
        "partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        f"position: 0 CreateTime: {TS} size: {len(data)} magic: 2 compresscodec: none crc: {crc} isvalid: true",
        f"| offset: 0 CreateTime: {TS} keySize: 1 valueSize: 1 sequence: -1 headerKeys: [h1,h2] key: k payload: v",
    ]


def test_text_shows_markers_null_values_legacy_entries_and_delete_horizon(tmp_path: Path) -> None:
    horizon = RecordBatchBuilder(delete_horizon_ms=TS + 86_400_000)
    horizon.append(b"gone", None, timestamp=TS)
    data = assign_offsets([*v2_batches(), horizon.build()])
    v2_lines, v2_failed = text(write(tmp_path, data), PRINT_DATA)
    legacy_lines, legacy_failed = text(write(tmp_path, legacy_log(), "00000000000000000042.log"), PRINT_DATA)

    assert not v2_failed and not legacy_failed
    marker = [line for line in v2_lines if "endTxnMarker" in line]
    assert len(marker) == 1
    assert marker[0].endswith("headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 7")
    assert "key: tombstone" in "\n".join(v2_lines)
    tombstone = next(line for line in v2_lines if "key: tombstone" in line)
    assert "payload" not in tombstone and "valueSize: -1" in tombstone
    no_key = next(line for line in v2_lines if "payload: no key" in line)
    assert "keySize: -1" in no_key and " key: " not in no_key
    assert f"deleteHorizonMs: OptionalLong[{TS + 86_400_000}]" in v2_lines[-2]
    assert legacy_lines[1] == "Log starting offset: 42"
    assert legacy_lines[2].startswith("offset: 0 position: 0 NoTimestampType: -1 size: ")
    assert "magic: 0 compresscodec: none" in legacy_lines[2]
    assert "| offset: 0 NoTimestampType: -1 keySize: 5 valueSize: " in legacy_lines[3]
    assert any("magic: 1 compresscodec: lz4" in line for line in legacy_lines)


def test_text_escapes_control_characters_in_binary_payloads(tmp_path: Path) -> None:
    builder = RecordBatchBuilder()
    builder.append(b"a\nb", b"\x00\x01x\x7f", timestamp=TS)
    lines, _ = text(write(tmp_path, assign_offsets([builder.build()])), PRINT_DATA)
    assert lines[-1].endswith(r"key: a\x0ab payload: \x00\x01x\x7f")


# --- damaged logs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["v2", "legacy"])
def test_truncated_at_every_position_prints_whole_batches_then_the_cut(tmp_path: Path, kind: str) -> None:
    data = assign_offsets(v2_batches()) if kind == "v2" else legacy_log()
    full_rows = kafka_python_rows(data, with_records=True)
    boundaries = batch_boundaries(data)
    path = tmp_path / LOG_NAME
    for cut in range(len(data) + 1):
        path.write_bytes(data[:cut])
        rows, failed = dump(path, PRINT_DATA)
        whole = sum(1 for end in boundaries[1:] if end <= cut)
        assert rows[:whole] == full_rows[:whole], cut
        if cut in boundaries:
            assert (len(rows), failed) == (whole, False), cut
        else:
            assert failed, cut
            assert len(rows) == whole + 1, cut
            assert rows[-1]["position"] == boundaries[whole], cut
            assert "truncated" in str(rows[-1]["error"]), cut


def test_truncated_text_ends_with_found_error_line(tmp_path: Path) -> None:
    data = assign_offsets(v2_batches())
    cut = batch_boundaries(data)[2] + 30
    lines, failed = text(write(tmp_path, data[:cut]))
    assert failed
    assert lines[-1] == (
        f"Found error at position {batch_boundaries(data)[2]}: file is truncated: the last 30 bytes are a partial batch"
    )


def test_flipped_crc_field_is_shown_invalid_and_the_dump_goes_on(tmp_path: Path) -> None:
    data = bytearray(assign_offsets(v2_batches()))
    second = batch_boundaries(bytes(data))[1]
    data[second + CRC_OFFSET] ^= 0xFF
    path = write(tmp_path, bytes(data))

    rows, failed = dump(path, PRINT_DATA)

    assert not failed
    assert [row["isvalid"] for row in rows] == [index != 1 for index in range(len(rows))]
    assert rows == kafka_python_rows(bytes(data), with_records=True)
    lines, _ = text(path)
    assert lines[3].endswith("isvalid: false")


def test_corrupt_compressed_records_are_an_error_only_when_records_are_decoded(tmp_path: Path) -> None:
    data = bytearray(assign_offsets(v2_batches()))
    boundaries = batch_boundaries(bytes(data))
    gzip_start = boundaries[1]
    data[gzip_start + RECORD_BATCH_OVERHEAD + 12] ^= 0xFF
    path = write(tmp_path, bytes(data))

    shallow_rows, shallow_failed = dump(path)
    deep_rows, deep_failed = dump(path, PRINT_DATA)

    assert not shallow_failed
    assert [row["isvalid"] for row in shallow_rows][:3] == [True, False, True]
    assert deep_failed
    assert "records" not in deep_rows[1]
    assert deep_rows[2] == {"error": deep_rows[2]["error"], "position": gzip_start}
    assert [row.get("baseOffset") for row in deep_rows[3:]] == [row["baseOffset"] for row in shallow_rows[2:]]


def test_undecodable_record_section_in_text_mode(tmp_path: Path) -> None:
    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", timestamp=TS)
    data = bytearray(assign_offsets([builder.build()]))
    data[RECORD_BATCH_OVERHEAD] = 0x7E  # the record's length varint now overruns the batch
    lines, failed = text(write(tmp_path, bytes(data)), DumpOptions(deep_iteration=True))
    assert failed
    assert lines[2].endswith("isvalid: false")
    assert lines[3].startswith("Found error at position 0: record length 63 overruns the batch")


def test_unknown_codec_id_is_an_error_after_the_batch_line(tmp_path: Path) -> None:
    data = bytearray(assign_offsets([_single_record_batch(), _single_record_batch()]))
    data[ATTRIBUTES_OFFSET + 1] |= 0x05
    rows, failed = dump(write(tmp_path, bytes(data)))
    assert failed
    assert rows[0]["compresscodec"] == "unknown"
    assert rows[1] == {"error": "unknown compression codec id 5", "position": 0}
    assert rows[2]["position"] == len(data) // 2


def test_zero_filled_preallocated_tail_is_reported_where_it_starts(tmp_path: Path) -> None:
    data = assign_offsets(v2_batches())
    rows, failed = dump(write(tmp_path, data + bytes(4096)))
    assert failed
    assert rows[:-1] == kafka_python_rows(data, with_records=False)
    assert rows[-1] == {"error": "record batch size 0 is smaller than the minimum 14", "position": len(data)}


def test_unknown_magic_stops_the_dump_at_that_batch(tmp_path: Path) -> None:
    data = bytearray(assign_offsets([_single_record_batch(), _single_record_batch()]))
    second = len(data) // 2
    data[second + 16] = 7
    rows, failed = dump(write(tmp_path, bytes(data)))
    assert failed
    assert len(rows) == 2
    assert rows[1] == {"error": "unknown record batch magic 7", "position": second}


def test_garbage_file_is_an_error_at_position_zero(tmp_path: Path) -> None:
    garbage = random.Random(20240611).randbytes(3000)
    rows, failed = dump(write(tmp_path, garbage), PRINT_DATA)
    assert failed
    assert rows[-1]["position"] == 0
    assert set(rows[-1]) == {"error", "position"}


# --- indexes -------------------------------------------------------------------------------------------


def test_offset_index_rows_are_its_entries_with_absolute_offsets(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, max_index_size=4096)
    expected = [(100 + 7 * slot, 4100 * slot + 3) for slot in range(40)]
    for offset, position in expected:
        index.append(offset, position)
    index.close()

    rows, failed = dump(path)
    lines, _ = text(path)

    assert not failed
    assert rows == [{"offset": offset, "position": position} for offset, position in expected]
    assert lines[1:] == [f"offset: {offset} position: {position}" for offset, position in expected]


def test_time_index_rows_are_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.timeindex"
    index = TimeIndex(path, 100, max_index_size=4096)
    expected = [(TS + 10 * slot, 100 + 3 * slot) for slot in range(30)]
    for timestamp, offset in expected:
        index.maybe_append(timestamp, offset)
    index.close()

    rows, failed = dump(path)
    lines, _ = text(path)

    assert not failed
    assert rows == [{"timestamp": timestamp, "offset": offset} for timestamp, offset in expected]
    assert lines[1:] == [f"timestamp: {timestamp} offset: {offset}" for timestamp, offset in expected]


def test_preallocated_index_stops_at_the_zero_tail_and_is_not_modified(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    entries = [(0, 0), (40, 4200), (81, 8400)]
    path.write_bytes(b"".join(struct.pack(">ii", *entry) for entry in entries) + bytes(8 * 1000))
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = (path.read_bytes(), path.stat().st_mtime_ns)

    rows, failed = dump(path)

    assert not failed
    assert rows == [{"offset": offset, "position": position} for offset, position in entries]
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.mark.parametrize(("name", "entry"), [("00000000000000000007.index", ">ii"), ("x.timeindex", ">qi")])
def test_index_truncated_at_every_position(tmp_path: Path, name: str, entry: str) -> None:
    layout = struct.Struct(entry)
    values = [(3 + slot, 10 * slot + 1) for slot in range(6)]
    data = b"".join(layout.pack(*value) for value in values)
    path = tmp_path / name
    base = 7 if name.endswith(".index") else 0
    keys = ("offset", "position") if name.endswith(".index") else ("timestamp", "offset")
    for cut in range(len(data) + 1):
        path.write_bytes(data[:cut])
        rows, failed = dump(path)
        whole = cut // layout.size
        expected = [
            dict(zip(keys, (a + base, b) if keys[0] == "offset" else (a, b + base), strict=True))
            for a, b in values[:whole]
        ]
        assert rows[:whole] == expected, cut
        if cut % layout.size:
            assert failed and rows[-1]["position"] == whole * layout.size, cut
        else:
            assert (len(rows), failed) == (whole, False), cut


def test_empty_offset_index_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, b"", "00000000000000000000.index")
    lines, failed = text(path)
    assert (lines, failed) == ([f"Dumping {path}", f"{path} is empty."], False)


# --- checkpoints and small files -----------------------------------------------------------------------


def test_offset_checkpoint_rows_keep_every_line_in_order(tmp_path: Path) -> None:
    path = write(tmp_path, b"0\n3\ntopic-a 0 10\ntopic.b 12 20\ntopic-a 0 30\n", "recovery-point-offset-checkpoint")
    rows, failed = dump(path)
    lines, _ = text(path)
    assert not failed
    assert rows == [
        {"topic": "topic-a", "partition": 0, "offset": 10},
        {"topic": "topic.b", "partition": 12, "offset": 20},
        {"topic": "topic-a", "partition": 0, "offset": 30},
    ]
    assert lines[1] == "topic: topic-a partition: 0 offset: 10"


def test_leader_epoch_checkpoint_rows(tmp_path: Path) -> None:
    path = write(tmp_path, b"0\n2\n0 0\n3 150\n", "leader-epoch-checkpoint")
    rows, failed = dump(path)
    assert not failed
    assert rows == [{"epoch": 0, "startOffset": 0}, {"epoch": 3, "startOffset": 150}]
    assert text(path)[0][1:] == ["epoch: 0 startOffset: 0", "epoch: 3 startOffset: 150"]


def test_corrupt_checkpoint_is_an_error_with_the_line_position(tmp_path: Path) -> None:
    path = write(tmp_path, b"0\n2\nt 0 1\nt zero 2\n", "cleaner-offset-checkpoint")
    rows, failed = dump(path)
    assert failed
    assert rows == [{"error": "malformed line 4 in checkpoint file: 't zero 2'", "position": 10}]


def test_meta_properties_row_holds_its_keys(tmp_path: Path) -> None:
    text_bytes = b"#\n#Thu Oct 10 11:57:10 UTC 2024\nnode.id=1\nversion=1\ncluster.id=abc\n"
    path = write(tmp_path, text_bytes, "meta.properties")
    rows, failed = dump(path)
    lines, _ = text(path)
    assert not failed
    assert rows == [{"node.id": "1", "version": "1", "cluster.id": "abc"}]
    assert lines[1:] == ["node.id=1", "version=1", "cluster.id=abc"]


def test_invalid_meta_properties_prints_its_keys_then_the_error(tmp_path: Path) -> None:
    path = write(tmp_path, b"version=7\n", "meta.properties")
    rows, failed = dump(path)
    assert failed
    assert rows == [{"version": "7"}, {"error": "unknown meta.properties version 7", "position": None}]
    assert text(path)[0][-1] == "Found error: unknown meta.properties version 7"


@pytest.mark.parametrize(
    ("content", "epoch"), [(b'{"version":0,"brokerEpoch":53326}', 53326), (b"", None), (b"not json", None)]
)
def test_clean_shutdown_marker_row(tmp_path: Path, content: bytes, epoch: int | None) -> None:
    rows, failed = dump(write(tmp_path, content, ".kafka_cleanshutdown"))
    assert (rows, failed) == ([{"brokerEpoch": epoch}], False)


def test_checkpoint_fixtures_match_their_text(kafka_samples_dir: Path) -> None:
    text_kinds = {
        FileKind.OFFSET_CHECKPOINT,
        FileKind.LEADER_EPOCH_CHECKPOINT,
        FileKind.META_PROPERTIES,
        FileKind.CLEAN_SHUTDOWN,
    }
    files = [
        path
        for path in sorted(kafka_samples_dir.rglob("*"))
        if path.is_file() and (info := classify(path)) is not None and info.kind in text_kinds
    ]
    assert len(files) > 400
    for path in files:
        rows, failed = dump(path)
        assert not failed, path
        lines = path.read_text(encoding="utf-8").splitlines()
        kind = classify(path).kind  # type: ignore[union-attr]
        if kind == FileKind.OFFSET_CHECKPOINT:
            assert rows == [
                {"topic": topic, "partition": int(partition), "offset": int(offset)}
                for topic, partition, offset in (line.split() for line in lines[2:])
            ], path
        elif kind == FileKind.LEADER_EPOCH_CHECKPOINT:
            assert rows == [
                {"epoch": int(epoch), "startOffset": int(start)}
                for epoch, start in (line.split() for line in lines[2:])
            ], path
        elif kind == FileKind.META_PROPERTIES:
            assert rows == [dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))], path
        else:
            assert len(rows) == 1 and set(rows[0]) == {"brokerEpoch"}, path


# --- file kinds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "base_offset"),
    [
        ("00000000000000000042.log", FileKind.LOG, 42),
        ("00000000000000000042.log.deleted", FileKind.LOG, 42),
        ("00000000000000000042.index", FileKind.OFFSET_INDEX, 42),
        ("00000000000000000042.timeindex.swap", FileKind.TIME_INDEX, 42),
        ("copy.log", FileKind.LOG, None),
        ("00000000000000007364-0000000001.checkpoint", FileKind.KRAFT_SNAPSHOT, None),
        ("bootstrap.checkpoint", FileKind.KRAFT_SNAPSHOT, None),
        ("replication-offset-checkpoint", FileKind.OFFSET_CHECKPOINT, None),
        ("log-start-offset-checkpoint", FileKind.OFFSET_CHECKPOINT, None),
        ("leader-epoch-checkpoint", FileKind.LEADER_EPOCH_CHECKPOINT, None),
        ("meta.properties", FileKind.META_PROPERTIES, None),
        (".kafka_cleanshutdown", FileKind.CLEAN_SHUTDOWN, None),
        ("00000000000000000042.txnindex", FileKind.TXN_INDEX, 42),
        ("00000000000000000042.txnindex.cleaned", FileKind.TXN_INDEX, 42),
        ("00000000000000000042.snapshot", FileKind.PRODUCER_SNAPSHOT, None),
    ],
)
def test_classify_by_name(name: str, kind: FileKind, base_offset: int | None) -> None:
    info = classify(Path("/x") / name)
    assert info is not None
    assert (info.kind, info.base_offset) == (kind, base_offset)


@pytest.mark.parametrize("name", ["partition.metadata", "notes.txt"])
def test_classify_rejects_other_files(name: str) -> None:
    assert classify(Path(name)) is None


def test_kraft_snapshot_name_gives_the_header(tmp_path: Path) -> None:
    path = write(tmp_path, assign_offsets([_single_record_batch()]), "00000000000000007364-0000000001.checkpoint")
    lines, failed = text(path)
    assert not failed
    assert lines[1] == "Snapshot end offset: 7364, epoch: 1"


# --- real Kafka log dirs -------------------------------------------------------------------------------


def test_real_consumer_offsets_log_matches_kafka_python(kafka_samples_dir: Path) -> None:
    path = kafka_samples_dir / WILLIAM / "__consumer_offsets-28" / LOG_NAME
    rows, failed = dump(path, PRINT_DATA)
    assert not failed
    assert len(rows) == 8202
    assert rows == kafka_python_rows(path.read_bytes(), with_records=True)


@pytest.mark.parametrize(("suffix", "layout", "count"), [(".index", ">ii", 254), (".timeindex", ">qi", 258)])
def test_real_indexes_match_their_bytes(kafka_samples_dir: Path, suffix: str, layout: str, count: int) -> None:
    path = kafka_samples_dir / WILLIAM / "__consumer_offsets-28" / f"00000000000000000000{suffix}"
    rows, failed = dump(path)
    assert not failed
    entries = list(struct.iter_unpack(layout, path.read_bytes()))
    expected = (
        [{"offset": a, "position": b} for a, b in entries]
        if suffix == ".index"
        else [{"timestamp": a, "offset": b} for a, b in entries]
    )
    assert len(rows) == count
    assert rows == expected


def test_real_kraft_snapshot_shows_header_and_footer_control_records(kafka_samples_dir: Path) -> None:
    path = kafka_samples_dir / ITUMELENG / "__cluster_metadata-0" / "00000000000000007364-0000000001.checkpoint"
    rows, failed = dump(path, PRINT_DATA)
    lines, _ = text(path, DumpOptions(deep_iteration=True))
    assert not failed
    assert rows == kafka_python_rows(path.read_bytes(), with_records=True)
    assert lines[1] == "Snapshot end offset: 7364, epoch: 1"
    assert lines[3].endswith("controlType: SNAPSHOT_HEADER(3)")
    assert lines[-1].endswith("controlType: SNAPSHOT_FOOTER(4)")


def test_every_real_sample_file_dumps_without_error(kafka_samples_dir: Path) -> None:
    dumped = 0
    for path in sorted(kafka_samples_dir.rglob("*")):
        info = classify(path) if path.is_file() else None
        if info is None:
            continue
        file_dump = FileDump(info, PRINT_DATA)
        rows = list(file_dump.json_rows())
        assert not file_dump.failed, (path, rows[-1])
        dumped += 1
    assert dumped > 1000


# --- transaction indexes and producer snapshots ----------------------------------------------------------


KAFKA_TXN = "kafka-3.9.1__transactions"


def test_txn_indexes_and_snapshots_print_as_kafkas_dump_log_prints_them(
    kafka_samples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kafka-dump-log.txt` is Kafka 3.9.1's `DumpLogSegments --files` over every `.txnindex` and `.snapshot` of the
    fixture, run from its folder (see PROVENANCE.md)."""
    root = kafka_samples_dir / KAFKA_TXN
    monkeypatch.chdir(root)
    kafka_lines = (root / "kafka-dump-log.txt").read_text().splitlines()
    names = [line.removeprefix("Dumping ") for line in kafka_lines if line.startswith("Dumping ")]
    assert len(names) == 13
    ours = []
    for name in names:
        lines, failed = text(Path(name))
        assert not failed
        ours.extend(lines)
    assert ours == kafka_lines


def test_txn_index_and_snapshot_rows(kafka_samples_dir: Path) -> None:
    partition = kafka_samples_dir / KAFKA_TXN / "data" / "txn-0"
    assert dump(partition / "00000000000000000007.txnindex") == (
        [{"version": 0, "producerId": 0, "firstOffset": 6, "lastOffset": 9, "lastStableOffset": 7}],
        False,
    )
    rows, failed = dump(partition / "00000000000000000051.snapshot")
    assert not failed
    assert rows[2] == {
        "producerId": 2,
        "producerEpoch": 0,
        "coordinatorEpoch": -1,
        "currentTxnFirstOffset": 49,
        "lastTimestamp": 1795444509752,
        "firstSequence": 1,
        "lastSequence": 1,
        "lastOffset": 50,
        "offsetDelta": 0,
        "timestamp": 1795444509752,
    }
    assert rows[0]["currentTxnFirstOffset"] is None


def test_a_producer_with_only_markers_has_no_batch_fields(tmp_path: Path) -> None:
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 7, 3, -1, -1, 0, 1_700_000_000_000, 2, -1)
    path = write(tmp_path, struct.pack(">hI", 1, crc32c.crc32c(body)) + body, "00000000000000000005.snapshot")
    lines, failed = text(path)
    assert not failed
    assert lines[1] == (
        "producerId: 7 producerEpoch: 3 coordinatorEpoch: 2 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1700000000000 "
    )


def test_damaged_txn_index_and_snapshot_report_where(tmp_path: Path) -> None:
    entry = struct.pack(">hqqqq", 0, 1, 0, 5, 6)
    torn = write(tmp_path, entry + entry[:10], "00000000000000000000.txnindex")
    rows, failed = dump(torn)
    assert failed
    assert rows[-1] == {"error": rows[-1]["error"], "position": 34}
    bad_version = write(tmp_path, entry + struct.pack(">hqqqq", 0x100, 1, 7, 8, 9), "00000000000000000001.txnindex")
    rows, failed = dump(bad_version)
    assert failed and len(rows) == 2 and rows[1]["position"] == 34
    snapshot = write(tmp_path, b"\x00\x01\x00\x00\x00\x00", "00000000000000000002.snapshot")
    rows, failed = dump(snapshot)
    assert failed and len(rows) == 1 and "too short" in str(rows[0]["error"])
