"""ApiVersions: the advertised table is exactly the router's, for every version; a too-new request gets the v0
answer with UNSUPPORTED_VERSION that clients parse before retrying."""

from __future__ import annotations

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from cluster.protocol.framing import API_VERSIONS_KEY, Request, decode_response, encode_response
from cluster.protocol.handlers.api_versions import ApiVersionsHandler
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from tests.cluster.protocol.helpers import request, run

SERVED_RANGES = {key: (served.min_version, served.max_version) for key, served in SERVED.items()}


@pytest.mark.parametrize(
    "version", range(SERVED[API_VERSIONS_KEY].min_version, SERVED[API_VERSIONS_KEY].max_version + 1)
)
def test_every_version_lists_exactly_the_served_ranges(version: int) -> None:
    body = build(
        load_request_schema(API_VERSIONS_KEY, version), {"client_software_name": "t", "client_software_version": "1"}
    )
    response = run(ApiVersionsHandler(SERVED)(request(body)))
    # Through the wire format and back, as a client reads it.
    _, decoded = decode_response(encode_response(1, response)[4:], load_response_schema(API_VERSIONS_KEY, version))
    assert decoded.error_code == ErrorCode.none
    assert {key.api_key: (key.min_version, key.max_version) for key in decoded.api_keys} == SERVED_RANGES


def test_a_too_new_request_gets_a_v0_answer_with_unsupported_version_and_the_ranges() -> None:
    too_new = Request(API_VERSIONS_KEY, SERVED[API_VERSIONS_KEY].max_version + 1, 9, "c", None)
    frame = encode_response(9, run(ApiVersionsHandler(SERVED)(too_new)))
    correlation_id, decoded = decode_response(frame[4:], load_response_schema(API_VERSIONS_KEY, 0))
    assert correlation_id == 9
    assert decoded.error_code == ErrorCode.unsupported_version
    assert {key.api_key: (key.min_version, key.max_version) for key in decoded.api_keys} == SERVED_RANGES
    # A v0 body is error_code, then the array: no throttle time, no tagged fields.
    assert len(frame) == 4 + 4 + 2 + 4 + 6 * len(SERVED)
