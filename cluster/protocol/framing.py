"""Kafka's request and response frames: the size prefix, the headers, and kio decoding of the body.

Every message on a Kafka connection is a frame, big-endian throughout:

    frame            = size:int32 payload[size]            size counts the bytes that follow it
    request payload  = request_header body
    request header   = api_key:int16 api_version:int16 correlation_id:int32 client_id:nullable_string
                       (header v1; v2, used by flexible versions, appends tagged fields)
    response payload = response_header body
    response header  = correlation_id:int32 (header v0; v1, flexible versions, appends tagged fields),
                       except ApiVersions, whose response header is always v0 so that a client can read the
                       answer before it knows which versions the server speaks.

Which header version goes with which (api_key, api_version), and each body's layout, come from kio's classes,
generated from Kafka's own message schemas. This module knows nothing of topics: it turns a payload into a
`Request` or raises a `ProtocolError`, and a response object into frame bytes (or, when a Fetch answer leaves
records in their segment files, a `SplicedFrame` of bytes and file regions: `cluster.protocol.file_region`).

Bytes from clients are untrusted: `decode_request` raises only `MalformedFrameError` or `UnsupportedApiError`,
never kio's, struct's or Python's own errors. Trailing bytes after a decoded body are ignored, as Kafka's broker
ignores them.
"""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any, cast

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import MalformedFrameError, UnsupportedApiError
from cluster.protocol.file_region import FileRegion

SIZE = struct.Struct(">i")  # the frame's size prefix
FIXED_HEADER = struct.Struct(
    ">"
    "h"  # api_key
    "h"  # api_version
    "i"  # correlation_id
)
API_VERSIONS_KEY = 18
# Header v1 (the fixed fields and client_id) is a prefix of header v2.
_READ_HEADER_V1 = entity_reader(RequestHeaderV1)


@dataclass(frozen=True, slots=True)
class ApiRange:
    """The versions of one API this server serves, both ends included."""

    min_version: int
    max_version: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min_version <= version <= self.max_version


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request: its header's fields, its kio body, its connection's context (listener, client
    address, principal) and its size (the frame without its size prefix, as Kafka's quotas count a request).
    `body` is None only for an ApiVersions request newer than this server serves, whose body cannot be decoded but
    must still be answered."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    context: ConnectionContext = field(default_factory=ConnectionContext.unnamed)
    size_bytes: int = 0


def decode_request(
    payload: bytes, supported: Mapping[int, ApiRange], context: ConnectionContext | None = None
) -> Request:
    """The request in `payload` (a frame without its size prefix). `supported` is every API this server serves.

    `context` is the connection's (an anonymous PLAINTEXT one when not given, as for a request decoded outside a
    listener). Raises `UnsupportedApiError` for an API key or version outside `supported` (a too-new ApiVersions request
    excepted), `MalformedFrameError` for bytes that do not decode.
    """
    if len(payload) < FIXED_HEADER.size:
        raise MalformedFrameError(f"a request of {len(payload)} bytes is shorter than its fixed header")
    api_key, api_version, correlation_id = FIXED_HEADER.unpack_from(payload)
    served = supported.get(api_key)
    if served is None:
        raise UnsupportedApiError(f"api key {api_key} is not served")
    if api_version not in served:
        if api_key == API_VERSIONS_KEY and api_version > served.max_version:
            # The header up to client_id is the same in v1 and v2; the body's layout is unknown.
            header, _ = _decode(_READ_HEADER_V1, payload, 0, "ApiVersions header")
            return Request(
                api_key, api_version, correlation_id, header.client_id, None, context or ConnectionContext.unnamed()
            )
        raise UnsupportedApiError(f"api key {api_key} version {api_version} is outside {served}")
    try:
        body_type = request_schema(api_key, api_version)
    except KioIndexError as exc:
        raise UnsupportedApiError(f"no schema for api key {api_key} version {api_version}") from exc
    header, header_size = _decode(entity_reader(body_type.__header_schema__), payload, 0, "request header")
    body, _ = _decode(entity_reader(body_type), payload, header_size, f"body of api {api_key} v{api_version}")
    return Request(
        api_key,
        api_version,
        correlation_id,
        header.client_id,
        body,
        context or ConnectionContext.unnamed(),
        len(payload),
    )


@functools.cache
def request_schema(api_key: int, api_version: int) -> type[Any]:
    """kio's request class of the API version. kio resolves it by module path on every call (5-20 us, a tenth of
    a Fetch's handling); the keys are the served versions, a few hundred at most."""
    return load_request_schema(api_key, api_version)


@functools.cache
def response_schema(api_key: int, api_version: int) -> type[Any]:
    """kio's response class of the API version, cached as `request_schema`."""
    return load_response_schema(api_key, api_version)


def _decode(reader: Any, payload: bytes, offset: int, what: str) -> tuple[Any, int]:
    """`reader(payload, offset)`, with every decoding failure as `MalformedFrameError`."""
    try:
        value, size = reader(payload, offset)
    # kio raises its SerialError family for short or invalid bytes; its typed fields reject out-of-range
    # values with ValueError/TypeError, invalid UTF-8 surfaces as UnicodeDecodeError (a ValueError), and a tagged
    # field it has no schema for as KeyError (Kafka's own parser skips those; kio 0.6.5 refuses them).
    except (SerialError, ValueError, TypeError, OverflowError, LookupError) as exc:
        raise MalformedFrameError(f"cannot decode the {what}: {exc}") from exc
    return value, size


@dataclass(frozen=True, slots=True)
class SplicedFrame:
    """A response frame whose records stay in their files: bytes and `FileRegion`s, to be written in order."""

    parts: tuple[bytes | FileRegion, ...]

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def close(self) -> None:
        """Closes the files of its regions (once sent, or when the frame is not sent)."""
        for part in self.parts:
            if isinstance(part, FileRegion):
                part.close()


class _SplicingBuffer:
    """What kio writes into: bytes are appended, a `FileRegion` (a records field left in its file) cuts the frame
    there. kio asks a bytes field only for its `len` and hands it to `write` whole."""

    def __init__(self) -> None:
        self.parts: list[bytes | FileRegion] = []
        self._current = io.BytesIO()

    def write(self, value: bytes | FileRegion) -> int:
        if isinstance(value, FileRegion):
            self.parts.extend((self._current.getvalue(), value))
            self._current = io.BytesIO()
            return len(value)
        return self._current.write(value)

    def close(self) -> list[bytes | FileRegion]:
        self.parts.append(self._current.getvalue())
        return self.parts


def encode_response(correlation_id: int, response: Any) -> bytes | SplicedFrame:
    """The frame (size prefix included) answering request `correlation_id` with the kio `response`, whose class
    names its header version: bytes, or a `SplicedFrame` when the response holds `FileRegion`s."""
    header_type = response.__header_schema__
    buffer = _SplicingBuffer()
    buffer.write(SIZE.pack(0))
    # kio's writers declare a stream or binary file; they call only `write`, which the buffer has.
    writable = cast(IO[bytes], buffer)
    entity_writer(header_type)(writable, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(writable, response)
    parts = buffer.close()
    first = parts[0]
    assert isinstance(first, bytes), "a frame starts with its size and header"
    head = SIZE.pack(sum(len(part) for part in parts) - SIZE.size) + first[SIZE.size :]
    if len(parts) == 1:
        return head
    return SplicedFrame((head, *(part for part in parts[1:] if len(part))))


def encode_request(api_key: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """The frame of a request: what clients send. Used to speak to the server from tests and tools."""
    header_type = body.__header_schema__
    header = header_type(
        request_api_key=api_key,
        request_api_version=body.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header)
    entity_writer(type(body))(buffer, body)
    payload = buffer.getvalue()
    return SIZE.pack(len(payload)) + payload


def decode_response(payload: bytes, response_type: type[Any]) -> tuple[int, Any]:
    """(correlation_id, body) of a response frame's payload, as a client reads it; `MalformedFrameError` if the
    bytes do not decode as `response_type`."""
    header, header_size = _decode(entity_reader(response_type.__header_schema__), payload, 0, "response header")
    body, _ = _decode(entity_reader(response_type), payload, header_size, f"{response_type.__name__}")
    return header.correlation_id, body
