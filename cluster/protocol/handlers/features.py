"""UpdateFeatures (key 57): finalized feature levels changed as Kafka's `kafka-features upgrade|downgrade|disable`
and Admin `updateFeatures` ask (the rules, refusals and messages are `actors.core.controller.finalized_features`').

Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31) for the whole request. A refused update
refuses every one (INVALID_UPDATE_VERSION, 95), answered as Kafka's controller does: a top-level error whose message
begins "The update failed for all features since the following feature had an error: ", and no per-feature result.
Applied (or valid, with `validate_only`), v0-1 answer each feature NONE (its message "NONE", as Kafka's); v2 answers
the top level only. v0's
`allow_downgrade` is a safe downgrade, its absence an upgrade. After a change this listener's `FeatureCache` reloads
at once, so its next ApiVersions shows it; other listeners within their refresh interval.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.controller.finalized_features import SAFE_DOWNGRADE, UPGRADE, FeatureUpdate
from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.error_codes import error_code
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows_cluster
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.security_view import SecurityView
from storage.errors import RaybrokerError

UPDATE_FEATURES_KEY = 57
# The last version answering a result per feature.
PER_FEATURE_RESULTS_VERSION = 1
REFUSED_PREFIX = "The update failed for all features since the following feature had an error: "


class UpdateFeaturesHandler(GuardedHandler[SecurityView]):
    """Answers UpdateFeatures (see the module docstring) for the listener of broker `node_id`, which names itself
    as the controller in a refusal's message, as every listener answers administrative requests itself."""

    def __init__(
        self, security: SecurityView, features: FeatureCache, node_id: int, access: AccessControl | None = None
    ) -> None:
        super().__init__(security, access)
        self._features = features
        self._node_id = node_id

    async def __call__(self, request: Request) -> Any:
        body = request.body
        response_type = response_schema(UPDATE_FEATURES_KEY, request.api_version)
        updates = [
            FeatureUpdate(
                update.feature,
                int(update.max_version_level),
                int(update.upgrade_type)
                if hasattr(update, "upgrade_type")
                else (SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE),
            )
            for update in body.feature_updates
        ]
        if not allows_cluster(self._access, request.context, AclOperation.ALTER):
            return self._answer(response_type, ErrorCode.cluster_authorization_failed, None, [])
        validate_only = bool(getattr(body, "validate_only", False))
        try:
            await self._view.update_features(updates, validate_only, str(self._node_id))
        except RaybrokerError as exc:
            return self._answer(response_type, error_code(exc), REFUSED_PREFIX + str(exc), [])
        if not validate_only:
            await self._features.refresh()
        results = [u.feature for u in updates] if request.api_version <= PER_FEATURE_RESULTS_VERSION else []
        return self._answer(response_type, ErrorCode.none, None, results)

    @staticmethod
    def _answer(response_type: Any, code: ErrorCode, message: str | None, features: list[str]) -> Any:
        return build(
            response_type,
            {
                "throttle_time": 0,
                "error_code": code,
                "error_message": message,
                "results": [{"feature": f, "error_code": ErrorCode.none, "error_message": "NONE"} for f in features],
            },
        )
