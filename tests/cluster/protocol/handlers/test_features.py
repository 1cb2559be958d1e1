"""UpdateFeatures' handler over the in-process controller: ALTER on the cluster is needed (a refused principal changes
nothing), an applied update moves this listener's copy of the features at once (its next ApiVersions shows the new
epoch), and v0 requests (`allow_downgrade` in place of the upgrade type) are served, a refusal with Kafka's whole
message. Kafka 4.2 is compared over the wire in `tests/cluster/protocol/test_features.py`."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from actors.core.controller.finalized_features import METADATA_VERSION, METADATA_VERSION_LEVEL
from actors.core.in_process_broker import InProcessBroker
from actors.core.security.acl_bindings import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.handlers.features import REFUSED_PREFIX, UPDATE_FEATURES_KEY, UpdateFeaturesHandler
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.handlers.test_acls import ADMIN, ALICE, access_for, ask
from tests.cluster.protocol.helpers import add_acls, run

DOWNGRADE = {"feature_updates": [{"feature": "transaction.version", "max_version_level": 0, "upgrade_type": 2}]}


def test_update_features_needs_alter_on_the_cluster(broker: InProcessBroker, security: SecurityView) -> None:
    access = access_for(security)
    features = FeatureCache(security)
    handler = UpdateFeaturesHandler(security, features, 0, access)
    before = run(security.finalized_features())
    refused = ask(handler, UPDATE_FEATURES_KEY, DOWNGRADE, 1, ALICE)
    assert (refused.error_code, refused.results) == (ErrorCode.cluster_authorization_failed, ())
    assert run(security.finalized_features()) == before

    add_acls(
        broker.controller,
        AclBinding(
            ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, ALICE, "*", AclOperation.ALTER,
            AclPermissionType.ALLOW,
        ),
    )  # fmt: skip
    run(access.refresh())
    applied = ask(handler, UPDATE_FEATURES_KEY, DOWNGRADE, 1, ALICE)
    assert applied.error_code == ErrorCode.none
    assert [(r.feature, r.error_code, r.error_message) for r in applied.results] == [
        ("transaction.version", ErrorCode.none, "NONE")
    ]
    epoch, levels = features.current()
    assert before[1] == {
        METADATA_VERSION: METADATA_VERSION_LEVEL,
        "transaction.version": 2,
        "group.version": 1,
        "share.version": 1,
    }
    assert epoch > before[0]
    assert levels == {METADATA_VERSION: METADATA_VERSION_LEVEL, "group.version": 1, "share.version": 1}


def test_v0_requests_are_answered_with_kafkas_top_level_message(security: SecurityView) -> None:
    handler = UpdateFeaturesHandler(security, FeatureCache(security), 0, access_for(security))
    update = {"feature": METADATA_VERSION, "max_version_level": METADATA_VERSION_LEVEL}
    for allow_downgrade in (True, False):
        answer = ask(
            handler,
            UPDATE_FEATURES_KEY,
            {"feature_updates": [{**update, "allow_downgrade": allow_downgrade}]},
            0,
            ADMIN,
        )
        assert answer.error_code == ErrorCode.none, answer
    upgrade = {"feature": METADATA_VERSION, "max_version_level": METADATA_VERSION_LEVEL + 1, "allow_downgrade": False}
    refused = ask(handler, UPDATE_FEATURES_KEY, {"feature_updates": [upgrade]}, 0, ADMIN)
    assert refused.error_code == ErrorCode.invalid_update_version
    assert refused.error_message == (
        f"{REFUSED_PREFIX}Invalid update version {METADATA_VERSION_LEVEL + 1} for feature {METADATA_VERSION}. "
        f"Local controller 0 only supports versions {METADATA_VERSION_LEVEL}-{METADATA_VERSION_LEVEL}"
    )
