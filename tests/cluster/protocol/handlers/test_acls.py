"""CreateAcls, DescribeAcls and DeleteAcls without sockets, against the in-process controller's ACL store:
what the handlers answer is compared with what the store holds (the oracle), invalid entries fail alone with
INVALID_REQUEST, a principal without ALTER or DESCRIBE on the cluster is refused, a broker without an authorizer
answers SECURITY_DISABLED, and a change applies on the listener at once."""

from __future__ import annotations

from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.security.acl_bindings import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.framing import Request, decode_response, encode_response
from cluster.protocol.handlers.acls import (
    CREATE_ACLS_KEY,
    DELETE_ACLS_KEY,
    DESCRIBE_ACLS_KEY,
    CreateAclsHandler,
    DeleteAclsHandler,
    DescribeAclsHandler,
)
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.security_view import SecurityView
from storage.config.security_config import SecurityConfig
from tests.cluster.protocol.helpers import add_acls, run

ADMIN = "User:admin"
ALICE = "User:alice"
ANY = {"operation": AclOperation.ANY, "permission_type": AclPermissionType.ANY}
EVERYTHING = {
    "resource_type_filter": ResourceType.ANY,
    "resource_name_filter": None,
    "pattern_type_filter": PatternType.ANY,
    "principal_filter": None,
    "host_filter": None,
    **ANY,
}


def versions(key: int) -> range:
    return range(SERVED[key].min_version, SERVED[key].max_version + 1)


def access_for(security: SecurityView, authorizer: bool = True) -> AccessControl:
    properties = {"super.users": ADMIN}
    if authorizer:
        properties["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    access = AccessControl(SecurityConfig.from_properties(properties), security)
    run(access.refresh())
    return access


def ask(handler: Any, api_key: int, values: dict[str, Any], version: int, principal: str = ADMIN) -> Any:
    body = build(load_request_schema(api_key, version), values)
    context = ConnectionContext("PLAINTEXT", "PLAINTEXT", "127.0.0.1", principal)
    response = run(handler(Request(api_key, version, 1, "test", body, context)))
    return decode_response(encode_response(1, response)[4:], load_response_schema(api_key, version))[1]


def creation(binding: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": binding.resource_type,
        "resource_name": binding.resource_name,
        "resource_pattern_type": binding.pattern_type,
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation,
        "permission_type": binding.permission_type,
    }


def binding_of(resource: Any, entry: Any) -> AclBinding:
    """The binding a DescribeAcls resource and one of its entries, or a DeleteAcls match, name."""
    return AclBinding(
        ResourceType(resource.resource_type),
        resource.resource_name,
        PatternType(resource.pattern_type),
        entry.principal,
        entry.host,
        AclOperation(entry.operation),
        AclPermissionType(entry.permission_type),
    )


READ_ORDERS = AclBinding(
    ResourceType.TOPIC, "orders", PatternType.LITERAL, ALICE, "*", AclOperation.READ, AclPermissionType.ALLOW
)
WRITE_PREFIX = AclBinding(
    ResourceType.TOPIC, "orders-", PatternType.PREFIXED, ALICE, "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY
)
GROUP_READ = AclBinding(
    ResourceType.GROUP, "billing", PatternType.LITERAL, "User:*", "*", AclOperation.READ, AclPermissionType.ALLOW
)


@pytest.mark.parametrize("version", versions(CREATE_ACLS_KEY))
def test_created_bindings_are_described_and_deleted_as_the_store_holds_them(
    security: SecurityView, version: int
) -> None:
    access = access_for(security)
    wanted = [READ_ORDERS, WRITE_PREFIX, GROUP_READ, READ_ORDERS]
    created = ask(
        CreateAclsHandler(security, access), CREATE_ACLS_KEY, {"creations": [creation(b) for b in wanted]}, version
    )
    assert [result.error_code for result in created.results] == [ErrorCode.none] * 4
    _, stored = run(security.acls())
    assert stored == [READ_ORDERS, WRITE_PREFIX, GROUP_READ]

    described = ask(DescribeAclsHandler(security, access), DESCRIBE_ACLS_KEY, EVERYTHING, version)
    assert described.error_code == ErrorCode.none
    assert len(described.resources) == 3
    assert [binding_of(resource, entry) for resource in described.resources for entry in resource.acls] == stored
    topics_only = {**EVERYTHING, "resource_type_filter": ResourceType.TOPIC, "resource_name_filter": "orders-eu"}
    matched = ask(
        DescribeAclsHandler(security, access), DESCRIBE_ACLS_KEY, {**topics_only, "pattern_type_filter": 2}, version
    )
    assert [binding_of(r, e) for r in matched.resources for e in r.acls] == [WRITE_PREFIX]

    filters = [
        {**EVERYTHING, "resource_type_filter": ResourceType.TOPIC, "principal_filter": ALICE},
        {**EVERYTHING, "resource_name_filter": "orders"},
    ]
    deleted = ask(DeleteAclsHandler(security, access), DELETE_ACLS_KEY, {"filters": filters}, version)
    by_filter = [[binding_of(match, match) for match in result.matching_acls] for result in deleted.filter_results]
    assert by_filter == [[READ_ORDERS, WRITE_PREFIX], [READ_ORDERS]]
    assert run(security.acls())[1] == [GROUP_READ]


def test_invalid_creations_and_filters_fail_alone_with_invalid_request(security: SecurityView) -> None:
    access = access_for(security)
    cluster_named_wrong = {**creation(READ_ORDERS), "resource_type": ResourceType.CLUSTER}
    creations = [
        creation(READ_ORDERS),
        {**creation(READ_ORDERS), "resource_type": 99},
        {**creation(READ_ORDERS), "resource_pattern_type": PatternType.MATCH},
        {**creation(READ_ORDERS), "operation": AclOperation.ANY},
        {**creation(READ_ORDERS), "principal": "alice"},
        {**creation(READ_ORDERS), "resource_name": ""},
        cluster_named_wrong,
    ]
    created = ask(CreateAclsHandler(security, access), CREATE_ACLS_KEY, {"creations": creations}, 3)
    codes = [result.error_code for result in created.results]
    assert codes == [ErrorCode.none] + [ErrorCode.invalid_request] * 6
    assert all(result.error_message for result in created.results[1:])
    assert CLUSTER_NAME in created.results[-1].error_message
    assert run(security.acls())[1] == [READ_ORDERS]

    unknown = ask(DescribeAclsHandler(security, access), DESCRIBE_ACLS_KEY, {**EVERYTHING, "operation": 0}, 3)
    assert (unknown.error_code, unknown.resources) == (ErrorCode.invalid_request, ())
    filters = [{**EVERYTHING, "resource_type_filter": 0}, EVERYTHING]
    deleted = ask(DeleteAclsHandler(security, access), DELETE_ACLS_KEY, {"filters": filters}, 3)
    assert [result.error_code for result in deleted.filter_results] == [ErrorCode.invalid_request, ErrorCode.none]
    assert [len(result.matching_acls) for result in deleted.filter_results] == [0, 1]


def test_acl_apis_need_alter_or_describe_on_the_cluster(broker: InProcessBroker, security: SecurityView) -> None:
    add_acls(broker.controller, GROUP_READ)
    access = access_for(security)
    denied = ErrorCode.cluster_authorization_failed
    created = ask(
        CreateAclsHandler(security, access), CREATE_ACLS_KEY, {"creations": [creation(READ_ORDERS)] * 2}, 3, ALICE
    )
    assert [result.error_code for result in created.results] == [denied, denied]
    described = ask(DescribeAclsHandler(security, access), DESCRIBE_ACLS_KEY, EVERYTHING, 3, ALICE)
    assert (described.error_code, described.resources) == (denied, ())
    deleted = ask(DeleteAclsHandler(security, access), DELETE_ACLS_KEY, {"filters": [EVERYTHING]}, 3, ALICE)
    assert [result.error_code for result in deleted.filter_results] == [denied]
    assert run(security.acls())[1] == [GROUP_READ]

    describer = AclBinding(
        ResourceType.CLUSTER,
        CLUSTER_NAME,
        PatternType.LITERAL,
        ALICE,
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )
    add_acls(broker.controller, describer)
    run(access.refresh())
    described = ask(DescribeAclsHandler(security, access), DESCRIBE_ACLS_KEY, EVERYTHING, 3, ALICE)
    assert described.error_code == ErrorCode.none and len(described.resources) == 2
    deleted = ask(DeleteAclsHandler(security, access), DELETE_ACLS_KEY, {"filters": [EVERYTHING]}, 3, ALICE)
    assert deleted.filter_results[0].error_code == denied


def test_a_broker_without_an_authorizer_answers_security_disabled(security: SecurityView) -> None:
    access = access_for(security, authorizer=False)
    disabled = ErrorCode.security_disabled
    created = ask(CreateAclsHandler(security, access), CREATE_ACLS_KEY, {"creations": [creation(READ_ORDERS)]}, 3)
    described = ask(DescribeAclsHandler(security, access), DESCRIBE_ACLS_KEY, EVERYTHING, 3)
    deleted = ask(DeleteAclsHandler(security, access), DELETE_ACLS_KEY, {"filters": [EVERYTHING]}, 3)
    codes = [created.results[0].error_code, described.error_code, deleted.filter_results[0].error_code]
    assert codes == [disabled] * 3
    assert run(security.acls())[1] == []


def test_a_change_applies_on_this_listener_at_once(security: SecurityView) -> None:
    access = access_for(security)
    alice = ConnectionContext("PLAINTEXT", "PLAINTEXT", "127.0.0.1", ALICE)
    assert not access.allows(alice, AclOperation.READ, ResourceType.TOPIC, "orders")
    ask(CreateAclsHandler(security, access), CREATE_ACLS_KEY, {"creations": [creation(READ_ORDERS)]}, 3)
    assert access.allows(alice, AclOperation.READ, ResourceType.TOPIC, "orders")
    ask(DeleteAclsHandler(security, access), DELETE_ACLS_KEY, {"filters": [EVERYTHING]}, 3)
    assert not access.allows(alice, AclOperation.READ, ResourceType.TOPIC, "orders")
