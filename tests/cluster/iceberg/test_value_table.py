"""Values parsed into the value modes' columns without Ray: a record that fits is a row with its partition, offset and
timestamp; one that does not (not JSON or msgpack, not an object, a wrong type, a number out of range, a required
field absent, a tombstone) is a dead-letter row with its key, value and the reason."""

from __future__ import annotations

import datetime
import json

import msgpack
import pyarrow as pa
import pytest

from cluster.iceberg.translation import is_local_warehouse
from cluster.iceberg.value_table import DEAD_LETTER_SCHEMA, ValueRows, dead_letter_identifier, value_schema
from storage.config.iceberg_value_schema import parse_value_schema

COLUMNS = parse_value_schema("id BIGINT NOT NULL, name STRING, score FLOAT, seen TIMESTAMP, small INT, raw BINARY")
UTC = datetime.UTC


def _batch(values: list[bytes | None]) -> pa.RecordBatch:
    """A batch shaped as `cluster.records.arrow_records` decodes one (with headers)."""
    count = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([1] * count, pa.int32()),
            "offset": pa.array(range(10, 10 + count), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000_000] * count, pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * count, pa.int32()),
            "key": pa.array([b"k%d" % i for i in range(count)], pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array([None] * count, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        }
    )


def test_json_values_become_rows_and_the_unfit_ones_dead_letters() -> None:
    good = {"id": 1, "name": "a", "score": 1, "seen": "2026-01-02T03:04:05+01:00", "small": -5, "raw": "x", "extra": 1}
    values = [
        json.dumps(good).encode(),
        json.dumps({"id": 2, "seen": 1_700_000_000_123}).encode(),
        b"{not json",
        b"[1, 2]",
        json.dumps({"id": "3"}).encode(),
        json.dumps({"id": 4, "small": 2**31}).encode(),
        json.dumps({"name": "no id"}).encode(),
        None,
        json.dumps({"id": 5, "seen": "yesterday"}).encode(),
        json.dumps({"id": True}).encode(),
    ]
    rows, dead = ValueRows("json", COLUMNS).split(_batch(values))
    assert rows.schema.names == [f.name for f in value_schema(COLUMNS).fields]
    assert rows.to_pylist() == [
        {
            "partition": 1,
            "offset": 10,
            "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
            "id": 1,
            "name": "a",
            "score": 1.0,
            "seen": datetime.datetime(2026, 1, 2, 2, 4, 5, tzinfo=UTC),
            "small": -5,
            "raw": b"x",
        },
        {
            "partition": 1,
            "offset": 11,
            "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
            "id": 2,
            "name": None,
            "score": None,
            "seen": datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC),
            "small": None,
            "raw": None,
        },
    ]
    assert dead.schema.names == [f.name for f in DEAD_LETTER_SCHEMA.fields]
    errors = dict(zip(dead.column("offset").to_pylist(), dead.column("error").to_pylist(), strict=True))
    assert sorted(errors) == list(range(12, 20))
    assert errors[12].startswith("value does not decode: JSONDecodeError")
    assert errors[13] == "value is a list, not an object"
    assert errors[14] == "field 'id': '3' does not fit long"
    assert errors[15] == f"field 'small': {2**31} does not fit int"
    assert errors[16] == "required field 'id' is absent or null"
    assert errors[17] == "no value (a tombstone)"
    assert errors[18] == "field 'seen': 'yesterday' does not fit timestamptz"
    assert errors[19] == "field 'id': True does not fit long"
    assert dead.column("value").to_pylist()[0] == b"{not json" and dead.column("key").to_pylist()[0] == b"k2"


def test_msgpack_values_take_bytes_and_refuse_what_does_not_decode() -> None:
    values = [msgpack.packb({"id": 7, "raw": b"\xff\x00"}), b"\xc1", msgpack.packb(3)]
    rows, dead = ValueRows("msgpack", COLUMNS).split(_batch(values))
    assert [(row["id"], row["raw"]) for row in rows.to_pylist()] == [(7, b"\xff\x00")]
    assert dead.column("offset").to_pylist() == [11, 12]
    assert dead.column("error").to_pylist()[1] == "value is a int, not an object"


def test_the_dead_letter_table_is_named_after_the_table() -> None:
    assert dead_letter_identifier(("raybroker", "clicks")) == ("raybroker", "clicks_dlq")


@pytest.mark.parametrize(
    ("location", "local"),
    [("file:///var/wh/t", True), ("/var/wh/t", True), ("s3://bucket/wh/t", False), ("gs://b/t", False)],
)
def test_local_warehouses_are_file_uris_and_bare_paths(location: str, local: bool) -> None:
    assert is_local_warehouse(location) is local
