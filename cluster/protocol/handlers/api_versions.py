"""ApiVersions (key 18): the versions of every API this server serves, as ranges, and the cluster's features.

Clients intersect these ranges with their own and use the highest common version of each API, so the table must
list exactly what the handlers implement. A request newer than this server's ApiVersions is answered in the v0
body format (whose header is v0 too) with UNSUPPORTED_VERSION (35) and the full table: clients parse that, then
retry with a version both sides know.

v3+ also carries the features (`actors.core.controller.finalized_features`): the levels this broker supports, and the
cluster's finalized levels with their epoch from the listener's `FeatureCache` (Kafka 4 producers read
`transaction.version` there, `kafka-features describe` all of it). v3 and v4 answer the same but for the supported
features whose lowest level is 0 (`transaction.version`), which only v4 lists, as Kafka leaves them out of v3
(KAFKA-17492).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.controller.finalized_features import SUPPORTED_FEATURES
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.framing import API_VERSIONS_KEY, ApiRange, Request, response_schema
from cluster.protocol.messages import build

# The first version listing supported features whose lowest level is 0 (KAFKA-17492).
FIRST_ZERO_FEATURE_VERSION = 4


class ApiVersionsHandler:
    """Answers ApiVersions from the router's table of served APIs and the listener's copy of the features."""

    def __init__(self, served: Mapping[int, ApiRange], features: FeatureCache) -> None:
        self._api_keys = [
            {"api_key": key, "min_version": served[key].min_version, "max_version": served[key].max_version}
            for key in sorted(served)
        ]
        self._features = features

    async def __call__(self, request: Request) -> Any:
        if request.body is None:
            return build(
                response_schema(API_VERSIONS_KEY, 0),
                {"error_code": ErrorCode.unsupported_version, "api_keys": self._api_keys},
            )
        epoch, levels = self._features.current()
        supported = [
            {"name": name, "min_version": low, "max_version": high}
            for name, (low, high) in sorted(SUPPORTED_FEATURES.items())
            if low > 0 or request.api_version >= FIRST_ZERO_FEATURE_VERSION
        ]
        finalized = [
            {"name": name, "max_version_level": level, "min_version_level": level}
            for name, level in sorted(levels.items())
        ]
        return build(
            response_schema(API_VERSIONS_KEY, request.api_version),
            {
                "error_code": ErrorCode.none,
                "api_keys": self._api_keys,
                "throttle_time": 0,
                "supported_features": supported,
                "finalized_features_epoch": epoch,
                "finalized_features": finalized,
            },
        )
