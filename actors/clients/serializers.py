"""Serializers and deserializers for record keys and values (Kafka's `Serializer`/`Deserializer`).

The broker stores keys and values as opaque bytes; these functions turn Python values into those bytes
and back. A serializer is any `Callable[[Any], bytes]`, a deserializer any `Callable[[bytes], Any]`
(kafka-python's convention), so a user's own function plugs in the same way.

| name      | bytes                                                                           |
|-----------|---------------------------------------------------------------------------------|
| `msgpack` | MessagePack: `str` as the str type (UTF-8), `bytes` as the bin type; tuples read |
|           | back as lists; map keys may be any packable type                                |
| `json`    | UTF-8 JSON, compact separators (`,` `:`), non-ASCII as UTF-8, not `\\u` escapes |
| `string`  | UTF-8 text                                                                      |
| `default` | the producer's default: bytes-like as is, `str` as UTF-8, anything else msgpack |

Every failure, in either direction, raises `SerializationError` (the underlying `TypeError`,
`ValueError` or codec error is its `__cause__`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgpack

from storage.errors import SerializationError

Serializer = Callable[[Any], bytes]
Deserializer = Callable[[bytes], Any]


def msgpack_serializer(value: Any) -> bytes:
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SerializationError(f"cannot serialize {type(value).__name__} with msgpack: {exc}") from exc


def msgpack_deserializer(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{len(data)} bytes are not one msgpack value: {exc}") from exc


def json_serializer(value: Any) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"cannot serialize {type(value).__name__} as JSON: {exc}") from exc


def json_deserializer(data: bytes) -> Any:
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"{len(data)} bytes are not one UTF-8 JSON value: {exc}") from exc


def string_serializer(value: str) -> bytes:
    if not isinstance(value, str):
        raise SerializationError(f"the string serializer takes str, not {type(value).__name__}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SerializationError(f"cannot encode the string as UTF-8: {exc}") from exc


def string_deserializer(data: bytes) -> str:
    try:
        return bytes(data).decode("utf-8")
    except (TypeError, UnicodeDecodeError) as exc:
        raise SerializationError(f"{len(data)} bytes are not UTF-8 text: {exc}") from exc


def default_serializer(value: Any) -> bytes:
    """Bytes-like values pass unchanged, `str` becomes UTF-8, anything else MessagePack."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return string_serializer(value)
    return msgpack_serializer(value)


__all__ = [
    "Deserializer",
    "Serializer",
    "default_serializer",
    "json_deserializer",
    "json_serializer",
    "msgpack_deserializer",
    "msgpack_serializer",
    "string_deserializer",
    "string_serializer",
]
