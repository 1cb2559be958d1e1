"""Frames and headers: requests of every served API decode to what was encoded; header versions follow the API
version (ApiVersions answers with header v0); untrusted bytes raise only the protocol's typed errors."""

from __future__ import annotations

import contextlib
import io
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema

from cluster.protocol.error_codes import MalformedFrameError, ProtocolError, UnsupportedApiError
from cluster.protocol.framing import (
    API_VERSIONS_KEY,
    FIXED_HEADER,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from cluster.protocol.handlers.metadata import METADATA_KEY
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED


def metadata_request(version: int) -> object:
    return build(
        load_request_schema(METADATA_KEY, version),
        {
            "topics": [{"name": "t", "topic_id": None}],
            "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )


@pytest.mark.parametrize("version", [0, 8, 9, 12])
def test_a_request_decodes_to_what_was_encoded(version: int) -> None:
    body = metadata_request(version)
    frame = encode_request(METADATA_KEY, 77, "client-1", body)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    decoded = decode_request(frame[4:], SERVED)
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (
        3,
        version,
        77,
        "client-1",
    )
    assert decoded.body == body


def test_flexible_versions_use_header_v2_and_older_ones_header_v1() -> None:
    v8 = encode_request(METADATA_KEY, 1, None, metadata_request(8))
    v9 = encode_request(METADATA_KEY, 1, None, metadata_request(9))
    # v1: client_id null (int16 -1) then the body; v2 adds an empty tagged-field section (one 0 byte).
    assert v8[4 + FIXED_HEADER.size : 4 + FIXED_HEADER.size + 2] == b"\xff\xff"
    assert v9[4 + FIXED_HEADER.size : 4 + FIXED_HEADER.size + 3] == b"\xff\xff\x00"


def test_api_versions_responses_use_header_v0_even_when_flexible() -> None:
    response_type = load_response_schema(API_VERSIONS_KEY, 3)
    frame = encode_response(5, build(response_type, {"error_code": 0, "api_keys": [], "throttle_time": 0}))
    # size, correlation id, then the body at once: error_code 0, an empty compact array (1), throttle, no tags.
    assert frame == struct.pack(">ii", 12, 5) + b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"
    assert decode_response(frame[4:], response_type)[0] == 5


def test_flexible_responses_use_header_v1() -> None:
    response_type = load_response_schema(METADATA_KEY, 9)
    frame = encode_response(
        5,
        build(response_type, {"throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": 0, "topics": []}),
    )
    assert frame[4:9] == struct.pack(">i", 5) + b"\x00"


def test_unknown_api_keys_and_versions_are_unsupported() -> None:
    for api_key, version in ((99, 0), (METADATA_KEY, 13), (0, 2), (-1, 0)):
        with pytest.raises(UnsupportedApiError):
            decode_request(FIXED_HEADER.pack(api_key, version, 1) + b"\xff\xff", SERVED)


def test_a_too_new_api_versions_request_decodes_without_a_body() -> None:
    payload = FIXED_HEADER.pack(API_VERSIONS_KEY, 99, 3) + b"\x00\x02id" + b"unknown body layout"
    decoded = decode_request(payload, SERVED)
    assert (decoded.api_version, decoded.correlation_id, decoded.client_id, decoded.body) == (99, 3, "id", None)


def test_truncated_requests_are_malformed() -> None:
    payload = encode_request(METADATA_KEY, 1, "c", metadata_request(12))[4:]
    for cut in range(len(payload) - 1):
        with pytest.raises(MalformedFrameError):
            decode_request(payload[:cut], SERVED)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_protocol_errors(payload: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_request(payload, SERVED)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(
        sorted((key, version) for key, r in SERVED.items() for version in range(r.min_version, r.max_version + 1))
    ),
    st.integers(-(2**31), 2**31 - 1),
    st.binary(max_size=120),
)
def test_a_valid_header_before_garbage_raises_only_protocol_errors(
    key_version: tuple[int, int], correlation_id: int, tail: bytes
) -> None:
    api_key, version = key_version
    with contextlib.suppress(ProtocolError):
        decode_request(FIXED_HEADER.pack(api_key, version, correlation_id) + tail, SERVED)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_real_requests_raise_only_protocol_errors(data: st.DataObject) -> None:
    payload = bytearray(
        encode_request(METADATA_KEY, 1, "c", metadata_request(data.draw(st.sampled_from([1, 9, 12]))))[4:]
    )
    for _ in range(data.draw(st.integers(1, 4))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        decode_request(bytes(payload), SERVED)


@pytest.mark.parametrize("version", [4, 11, 12])
def test_a_response_holding_file_regions_is_spliced_into_the_same_bytes(version: int, tmp_path: Path) -> None:
    """A Fetch response whose records are left in a file encodes to a frame that, once the regions' bytes are put
    in its place, is byte for byte the frame of the same response holding those bytes (the oracle is kio's own
    encoding), for a legacy and the flexible (varint lengths) versions."""
    from cluster.protocol.file_region import FileRegion
    from cluster.protocol.framing import SplicedFrame
    from cluster.protocol.handlers.fetch import FETCH_KEY

    content = bytes(range(256)) * 300
    path = tmp_path / "segment.log"
    path.write_bytes(content)
    slices = [(100, 20_000), (30_000, 40_000)]

    def response(records: list[bytes | FileRegion]) -> object:
        partition = {
            "error_code": 0,
            "high_watermark": 9,
            "last_stable_offset": 9,
            "log_start_offset": 0,
            "aborted_transactions": [],
            "preferred_read_replica": -1,
        }
        return build(
            load_response_schema(FETCH_KEY, version),
            {
                "throttle_time": 0,
                "error_code": 0,
                "session_id": 0,
                "responses": [
                    {"topic": "t", "partitions": [{**partition, "partition_index": i, "records": r}]}
                    for i, r in enumerate(records)
                ],
            },
        )

    regions = [FileRegion(io.FileIO(path, "rb"), position, length) for position, length in slices]
    spliced = encode_response(7, response([*regions]))
    assert isinstance(spliced, SplicedFrame)
    assembled = b"".join(
        content[part.position : part.position + part.length] if isinstance(part, FileRegion) else part
        for part in spliced.parts
    )
    spliced.close()
    assert all(region.file.closed for region in regions)
    expected = encode_response(7, response([content[p : p + n] for p, n in slices]))
    assert assembled == expected
    assert len(spliced) == len(expected)
