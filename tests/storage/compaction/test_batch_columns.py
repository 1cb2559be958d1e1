"""decode_chunk against `records()` of each batch (the oracle): offsets, keys and null flags of the batches asked
for, in order, whichever decoder a batch goes through (alone, together with its small neighbours, legacy); a
corrupt batch names its file position; chunks are cut at CHUNK_BYTES."""

from __future__ import annotations

import random

import numpy as np
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from storage.compaction import batch_columns
from storage.compaction.batch_columns import chunks, decode_chunk
from storage.compaction.offset_map import SkimpyOffsetMap
from storage.errors import CorruptRecordError
from storage.records.compression import CompressionType
from storage.records.file_records import AnyBatch, iter_any_batches
from storage.records.record_batch import RecordBatchBuilder


def v2_batch(rng: random.Random, base_offset: int, count: int) -> bytes:
    builder = RecordBatchBuilder(compression=rng.choice(list(CompressionType)), base_offset=base_offset)
    for index in range(count):
        builder.append(
            None if rng.random() < 0.1 else b"k%d" % rng.randrange(10 ** rng.randint(1, 5)),
            None if rng.random() < 0.2 else b"v" * rng.randrange(50),
            timestamp=1_700_000_000_000 + index,
            headers=[("h", b"1")] if rng.random() < 0.1 else [],
        )
    return builder.build()


def legacy_entry(offset: int, key: bytes | None, value: bytes | None) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(offset, timestamp=1_700_000_000_000, key=key, value=value)
    return bytes(builder.build())


def mixed_log(rng: random.Random) -> list[AnyBatch]:
    data = bytearray()
    offset = 0
    for _ in range(30):
        kind = rng.choice(["small", "large", "legacy"])
        if kind == "legacy":
            data += legacy_entry(offset, rng.choice([None, b"legacy-key"]), rng.choice([None, b"v"]))
            offset += 1
        else:
            count = rng.randint(1, 31) if kind == "small" else rng.randint(32, 200)
            data += v2_batch(rng, offset, count)
            offset += count
    return list(iter_any_batches(bytes(data)))


@pytest.mark.parametrize("seed", range(8))
def test_decoded_columns_match_each_batchs_records(seed: int) -> None:
    rng = random.Random(seed)
    batches = mixed_log(rng)
    wanted = [rng.random() < 0.8 for _ in batches]

    decoded = decode_chunk(batches, wanted)

    expected = [record for batch, want in zip(batches, wanted, strict=True) if want for record in batch.records()]
    assert decoded.offsets.tolist() == [record.offset for record in expected]
    assert decoded.null_keys.tolist() == [record.key is None for record in expected]
    assert decoded.null_values.tolist() == [record.value is None for record in expected]
    offset_map = SkimpyOffsetMap(24 * 64)
    expected_keys = [record.key for record in expected if record.key is not None]
    digests = decoded.key_digests(~decoded.null_keys, offset_map)
    assert digests.tolist() == offset_map.digests(expected_keys).tolist()
    counts = [len(batch.records()) if want else 0 for batch, want in zip(batches, wanted, strict=True)]
    assert np.diff(decoded.bounds).tolist() == counts


def test_nothing_wanted_decodes_to_empty_columns() -> None:
    batches = mixed_log(random.Random(1))
    decoded = decode_chunk(batches, [False] * len(batches))
    assert len(decoded) == 0 and decoded.bounds.tolist() == [0] * (len(batches) + 1)


@pytest.mark.parametrize("count", [3, 100], ids=["decoded-with-neighbours", "decoded-alone"])
def test_corrupt_record_names_its_batch(count: int) -> None:
    rng = random.Random(count)
    good = v2_batch(rng, 0, 5)
    builder = RecordBatchBuilder(base_offset=5)
    for index in range(count):
        builder.append(b"key", b"value", timestamp=index)
    bad = bytearray(builder.build())
    # The first record's key length (a one-byte varint after length, attributes, two deltas) now overruns it.
    bad[61 + 4] = 0x7E
    batches = list(iter_any_batches(good + bytes(bad)))
    with pytest.raises(CorruptRecordError) as error:
        decode_chunk(batches, [True, True])
    assert (error.value.position, error.value.offset) == (len(good), 5)


def test_chunks_end_after_the_batch_that_reaches_the_chunk_size(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = mixed_log(random.Random(2))
    monkeypatch.setattr(batch_columns, "CHUNK_BYTES", 1000)
    cut = list(chunks(batches))
    assert [batch for chunk in cut for batch in chunk] == batches
    for chunk in cut[:-1]:
        assert sum(batch.size_in_bytes for batch in chunk) >= 1000
        assert sum(batch.size_in_bytes for batch in chunk[:-1]) < 1000
