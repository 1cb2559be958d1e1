"""`cluster.data.value_encoding` without Ray: values built column-wise are byte for byte what encoding each row on
its own gives (`json.dumps` with the module's settings, `msgpack.packb`), for every kind of column, nulls and
strings that need escaping."""

from __future__ import annotations

import datetime
import json

import msgpack
import pyarrow as pa
import pytest

from cluster.data.value_encoding import encode_values, json_text

ROWS = pa.table(
    {
        "text": ["plain", 'quote " and \\ backslash', "grüße ✓", "tab\tand\nnewline", None],
        "count": pa.array([1, -2, None, 2**62, 0], type=pa.int64()),
        "small": pa.array([1, 2, 3, None, 5], type=pa.int8()),
        "flag": [True, False, None, True, False],
        "ratio": [0.5, 3.0, None, 1e20, -0.0],
        "at": pa.array([0, 1_700_000_000_123, None, 5, 6], type=pa.timestamp("ms", tz="UTC")),
        "tags": [["a", "b"], [], None, ["c"], ["d"]],
        "inner": [{"x": 1, "y": "u"}, None, {"x": None, "y": "v"}, {"x": 4, "y": None}, {"x": 5, "y": "w"}],
    }
)


def test_rows_as_json_objects_equal_json_dumps_of_each_row() -> None:
    expected = [json_text(row).encode() for row in ROWS.to_pylist()]
    assert encode_values(ROWS, "json") == expected
    assert [json.loads(value) for value in expected][1]["text"] == 'quote " and \\ backslash'


def test_a_table_of_plain_columns_is_built_without_python_and_still_matches() -> None:
    plain = ROWS.select(["text", "count", "small", "flag"]).slice(0, 2)
    assert encode_values(plain, "json") == [json_text(row).encode() for row in plain.to_pylist()]


@pytest.mark.parametrize("name", ROWS.column_names)
def test_a_column_as_json_values_keeps_nulls_as_null_values(name: str) -> None:
    column = ROWS.column(name)
    expected = [None if value is None else json_text(value).encode() for value in column.to_pylist()]
    assert encode_values(column, "json") == expected


def test_rows_and_structs_as_msgpack_maps() -> None:
    packed = encode_values(ROWS.select(["text", "count", "flag", "tags", "inner"]), "msgpack")
    assert [msgpack.unpackb(value) for value in packed if value is not None] == ROWS.select(
        ["text", "count", "flag", "tags", "inner"]
    ).to_pylist()
    times = encode_values(ROWS.column("at"), "msgpack")
    unpacked = msgpack.unpackb(times[1], timestamp=3)
    assert unpacked == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC)
    assert times[2] is None


def test_binary_and_string_columns_are_their_bytes() -> None:
    assert encode_values(pa.chunked_array([pa.array([b"\x00\xff", None])]), "binary") == [b"\x00\xff", None]
    assert encode_values(ROWS.column("text"), "string") == [
        None if text is None else text.encode() for text in ROWS.column("text").to_pylist()
    ]


def test_rows_without_columns_are_empty_objects() -> None:
    assert encode_values(ROWS.select([]), "json") == [b"{}"] * ROWS.num_rows
