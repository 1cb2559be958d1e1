"""Serializers: round trips against the values themselves, the exact bytes of each format, typed failures."""

from __future__ import annotations

import json
import math
from typing import Any

import msgpack
import pytest

from actors.clients import serializers
from storage.errors import SerializationError

VALUES: list[Any] = [None, True, 0, -1, 2**63 - 1, 1.5, "", "héllo ✓", b"\x00\xff", [1, "a"], {"k": [1, 2]}]


@pytest.mark.parametrize("value", VALUES)
def test_msgpack_round_trips_every_packable_value(value: Any) -> None:
    assert serializers.msgpack_deserializer(serializers.msgpack_serializer(value)) == value


def test_msgpack_writes_str_as_str_type_and_bytes_as_bin_type() -> None:
    # fixstr 0xa1 + "a"; bin8 0xc4, length 1, 0x61.
    assert serializers.msgpack_serializer("a") == b"\xa1a"
    assert serializers.msgpack_serializer(b"a") == b"\xc4\x01a"


def test_msgpack_reads_tuples_back_as_lists_and_keeps_int_map_keys() -> None:
    assert serializers.msgpack_deserializer(serializers.msgpack_serializer((1, 2))) == [1, 2]
    assert serializers.msgpack_deserializer(serializers.msgpack_serializer({1: "x"})) == {1: "x"}


@pytest.mark.parametrize("value", [object(), 2**64, {1, 2}])
def test_msgpack_serializer_refuses_unpackable_values_with_a_typed_error(value: Any) -> None:
    with pytest.raises(SerializationError) as caught:
        serializers.msgpack_serializer(value)
    assert caught.value.__cause__ is not None


@pytest.mark.parametrize("data", [b"\xc1", b"\x92\x01", b"\x01\x02"])
def test_msgpack_deserializer_refuses_bad_bytes_with_a_typed_error(data: bytes) -> None:
    # 0xc1 is never used; 0x92 announces 2 items and has 1; two values where one is expected.
    with pytest.raises(SerializationError):
        serializers.msgpack_deserializer(data)


def test_json_is_compact_utf8() -> None:
    data = serializers.json_serializer({"a": [1, "é"]})
    assert data == '{"a":[1,"é"]}'.encode()
    assert serializers.json_deserializer(data) == json.loads(data)


@pytest.mark.parametrize("value", [object(), math.nan, b"bytes"])
def test_json_serializer_refuses_what_json_cannot_hold(value: Any) -> None:
    with pytest.raises(SerializationError):
        serializers.json_serializer(value)


@pytest.mark.parametrize("data", [b"{", b"\xff", b""])
def test_json_deserializer_refuses_bad_bytes(data: bytes) -> None:
    with pytest.raises(SerializationError):
        serializers.json_deserializer(data)


def test_string_round_trip_and_failures() -> None:
    assert serializers.string_serializer("ü") == b"\xc3\xbc"
    assert serializers.string_deserializer(b"\xc3\xbc") == "ü"
    with pytest.raises(SerializationError):
        serializers.string_serializer(b"not a str")  # type: ignore[arg-type]
    with pytest.raises(SerializationError):
        serializers.string_serializer("\udc80")  # a lone surrogate has no UTF-8 form
    with pytest.raises(SerializationError):
        serializers.string_deserializer(b"\xc3")


def test_default_serializer_passes_bytes_encodes_str_and_packs_the_rest() -> None:
    assert serializers.default_serializer(b"raw") == b"raw"
    assert serializers.default_serializer(bytearray(b"raw")) == b"raw"
    assert serializers.default_serializer(memoryview(b"raw")) == b"raw"
    assert serializers.default_serializer("text") == b"text"
    assert serializers.default_serializer({"n": 1}) == msgpack.packb({"n": 1}, use_bin_type=True)
    with pytest.raises(SerializationError):
        serializers.default_serializer(object())
