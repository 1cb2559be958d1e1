"""ApiVersions (key 18): the versions of every API this server serves, as ranges.

Clients intersect these ranges with their own and use the highest common version of each API, so the table must
list exactly what the handlers implement. A request newer than this server's ApiVersions is answered in the v0
body format (whose header is v0 too) with UNSUPPORTED_VERSION (35) and the full table: clients parse that, then
retry with a version both sides know.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.protocol.framing import API_VERSIONS_KEY, ApiRange, Request, response_schema
from cluster.protocol.messages import build


class ApiVersionsHandler:
    """Answers ApiVersions from the router's table of served APIs."""

    def __init__(self, served: Mapping[int, ApiRange]) -> None:
        self._api_keys = [
            {"api_key": key, "min_version": served[key].min_version, "max_version": served[key].max_version}
            for key in sorted(served)
        ]

    async def __call__(self, request: Request) -> Any:
        if request.body is None:
            return build(
                response_schema(API_VERSIONS_KEY, 0),
                {"error_code": ErrorCode.unsupported_version, "api_keys": self._api_keys},
            )
        return build(
            response_schema(API_VERSIONS_KEY, request.api_version),
            {"error_code": ErrorCode.none, "api_keys": self._api_keys, "throttle_time": 0},
        )
