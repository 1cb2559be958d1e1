"""Random record sets and the builder's bytes for them, shared by the record-column encoder and decoder tests."""

from __future__ import annotations

from hypothesis import strategies as st

from storage.records.record import Record
from storage.records.record_batch import RecordBatchBuilder
from storage.records.record_columns import decode_records
from tests.storage.builders import START_MS

Header = tuple[str, bytes | None]

blobs = st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([b"", b"x" * 300, b"y" * 9000]))
timestamps = st.integers(START_MS - 10**6, START_MS + 10**9)


def builder_batch(
    values: list[bytes | None],
    keys: list[bytes | None] | None,
    stamps: list[int],
    headers: list[tuple[Header, ...]] | None = None,
    **options: object,
) -> bytes:
    builder = RecordBatchBuilder(**options)  # type: ignore[arg-type]
    for index, value in enumerate(values):
        key = None if keys is None else keys[index]
        builder.append(key, value, timestamp=stamps[index], headers=() if headers is None else headers[index])
    return builder.build()


def oracle(section: bytes, count: int) -> list[Record]:
    return decode_records(section, count, 0, 0, None)


@st.composite
def record_sets(draw: st.DrawFn) -> tuple[list[bytes | None], list[bytes | None] | None, list[int]]:
    count = draw(st.integers(0, 80))
    values = draw(st.lists(blobs, min_size=count, max_size=count))
    keys = draw(st.one_of(st.none(), st.lists(blobs, min_size=count, max_size=count)))
    stamps = draw(st.lists(timestamps, min_size=count, max_size=count))
    return values, keys, stamps
