"""ApiVersions: the advertised table is exactly the router's, for every version, and v3+ carry the supported
features and the controller's finalized ones with their epoch (a listener with no copy yet answers epoch -1 and none
finalized); a too-new request gets the v0 answer with UNSUPPORTED_VERSION that clients parse before retrying; the
consumer group protocol's APIs are listed only while the broker serves that protocol."""

from __future__ import annotations

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from actors.core.controller.finalized_features import SUPPORTED_FEATURES, UNKNOWN_EPOCH
from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import ProtocolError
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.framing import API_VERSIONS_KEY, Request, decode_response, encode_request, encode_response
from cluster.protocol.handlers.api_versions import ApiVersionsHandler
from cluster.protocol.handlers.consumer_group_apis import CONSUMER_GROUP_DESCRIBE_KEY, CONSUMER_GROUP_HEARTBEAT_KEY
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED, Router
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerEndpoint
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from storage.config.broker_config import BrokerConfig
from storage.config.security_config import SecurityConfig
from tests.cluster.protocol.helpers import request, run

SERVED_RANGES = {key: (served.min_version, served.max_version) for key, served in SERVED.items()}
# The first version carrying the features.
FEATURES_VERSION = 3


@pytest.mark.parametrize(
    "version", range(SERVED[API_VERSIONS_KEY].min_version, SERVED[API_VERSIONS_KEY].max_version + 1)
)
def test_every_version_lists_exactly_the_served_ranges(
    version: int, features: FeatureCache, security: SecurityView
) -> None:
    body = build(
        load_request_schema(API_VERSIONS_KEY, version), {"client_software_name": "t", "client_software_version": "1"}
    )
    response = run(ApiVersionsHandler(SERVED, features)(request(body)))
    # Through the wire format and back, as a client reads it.
    _, decoded = decode_response(encode_response(1, response)[4:], load_response_schema(API_VERSIONS_KEY, version))
    assert decoded.error_code == ErrorCode.none
    assert {key.api_key: (key.min_version, key.max_version) for key in decoded.api_keys} == SERVED_RANGES
    if version >= FEATURES_VERSION:
        epoch, levels = run(security.finalized_features())
        # v3 leaves out the features supported from level 0 (KAFKA-17492), v4 lists them too.
        assert {key.name: (key.min_version, key.max_version) for key in decoded.supported_features} == {
            name: levels for name, levels in SUPPORTED_FEATURES.items() if levels[0] > 0 or version >= 4
        }
        assert decoded.finalized_features_epoch == epoch >= 0
        assert {key.name: (key.min_version_level, key.max_version_level) for key in decoded.finalized_features} == {
            name: (level, level) for name, level in levels.items()
        }


def test_a_listener_without_a_copy_of_the_features_answers_none_finalized(security: SecurityView) -> None:
    body = build(
        load_request_schema(API_VERSIONS_KEY, FEATURES_VERSION),
        {"client_software_name": "t", "client_software_version": "1"},
    )
    response = run(ApiVersionsHandler(SERVED, FeatureCache(security))(request(body)))
    assert (response.finalized_features_epoch, response.finalized_features) == (UNKNOWN_EPOCH, ())
    assert {key.name for key in response.supported_features} == {
        name for name, (low, _) in SUPPORTED_FEATURES.items() if low > 0
    }


def test_a_too_new_request_gets_a_v0_answer_with_unsupported_version_and_the_ranges(features: FeatureCache) -> None:
    too_new = Request(API_VERSIONS_KEY, SERVED[API_VERSIONS_KEY].max_version + 1, 9, "c", None)
    frame = encode_response(9, run(ApiVersionsHandler(SERVED, features)(too_new)))
    correlation_id, decoded = decode_response(frame[4:], load_response_schema(API_VERSIONS_KEY, 0))
    assert correlation_id == 9
    assert decoded.error_code == ErrorCode.unsupported_version
    assert {key.api_key: (key.min_version, key.max_version) for key in decoded.api_keys} == SERVED_RANGES
    # A v0 body is error_code, then the array: no throttle time, no tagged fields.
    assert len(frame) == 4 + 4 + 2 + 4 + 6 * len(SERVED)


def test_the_consumer_protocol_is_neither_listed_nor_served_when_turned_off(
    broker: InProcessBroker, security: SecurityView, features: FeatureCache
) -> None:
    """`group.coordinator.rebalance.protocols=classic`: ApiVersions lists no ConsumerGroupHeartbeat (68) or
    ConsumerGroupDescribe (69), so clients keep to the classic protocol (franz-go switches by what is listed), and a
    request of either is no request this listener serves (its connection is closed, as Kafka closes it)."""
    endpoint = BrokerEndpoint(0, "127.0.0.1", 9092, (("PLAINTEXT", "127.0.0.1", 9092),))
    routers = {
        protocols: Router(
            InProcessBrokerView(broker),
            endpoint,
            broker_config=BrokerConfig.from_properties({"group.coordinator.rebalance.protocols": protocols}),
            static_broker_keys=(),
            groups=GroupView.in_process(broker),
            transactions=TransactionView.in_process(broker),
            security=security,
            access=AccessControl(SecurityConfig.from_properties({}), security),
            features=features,
        )
        for protocols in ("classic", "classic,consumer")
    }
    context = ConnectionContext.unnamed()
    listed = {}
    for protocols, router in routers.items():
        body = build(
            load_request_schema(API_VERSIONS_KEY, 3), {"client_software_name": "t", "client_software_version": "1"}
        )
        frame = run(router.handle(encode_request(API_VERSIONS_KEY, 1, "t", body)[4:], context))
        _, decoded = decode_response(frame[4:], load_response_schema(API_VERSIONS_KEY, 3))
        listed[protocols] = {key.api_key for key in decoded.api_keys}
    assert listed["classic,consumer"] - listed["classic"] == {CONSUMER_GROUP_HEARTBEAT_KEY, CONSUMER_GROUP_DESCRIBE_KEY}
    describe = build(
        load_request_schema(CONSUMER_GROUP_DESCRIBE_KEY, 1),
        {"group_ids": ["g"], "include_authorized_operations": False},
    )
    payload = encode_request(CONSUMER_GROUP_DESCRIBE_KEY, 2, "t", describe)[4:]
    with pytest.raises(ProtocolError):
        run(routers["classic"].handle(payload, context))
    frame = run(routers["classic,consumer"].handle(payload, context))
    _, answer = decode_response(frame[4:], load_response_schema(CONSUMER_GROUP_DESCRIBE_KEY, 1))
    assert answer.groups[0].error_code == ErrorCode.group_id_not_found
