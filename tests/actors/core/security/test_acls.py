"""Kafka's ACL vocabulary (`actors/core/security/acl_bindings.py`): wire codes, tool spellings, what a binding refuses,
and filter matching against a model written from Kafka's `AclBindingFilter.matches` rules."""

from __future__ import annotations

import itertools

import pytest

from actors.core.security.acl_bindings import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
)
from storage.errors import InvalidRequestError, RaybrokerError

ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
TOPIC = ResourceType.TOPIC
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED


def binding(
    name: str = "orders",
    pattern: PatternType = LITERAL,
    principal: str = "User:alice",
    host: str = "*",
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = ALLOW,
    resource_type: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def test_enum_values_are_kafkas_wire_codes() -> None:
    assert [(m.name, m.value) for m in ResourceType] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("TOPIC", 2),
        ("GROUP", 3),
        ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5),
    ]
    assert [(m.name, m.value) for m in PatternType] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("MATCH", 2),
        ("LITERAL", 3),
        ("PREFIXED", 4),
    ]
    assert AclOperation.ALL == 2 and AclOperation.DESCRIBE == 8 and AclOperation.IDEMPOTENT_WRITE == 12
    assert [(m.name, m.value) for m in AclPermissionType] == [("UNKNOWN", 0), ("ANY", 1), ("DENY", 2), ("ALLOW", 3)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Read", AclOperation.READ),
        ("READ", AclOperation.READ),
        ("read", AclOperation.READ),
        ("DescribeConfigs", AclOperation.DESCRIBE_CONFIGS),
        ("DESCRIBE_CONFIGS", AclOperation.DESCRIBE_CONFIGS),
        ("describe-configs", AclOperation.DESCRIBE_CONFIGS),
        ("IdempotentWrite", AclOperation.IDEMPOTENT_WRITE),
        ("ClusterAction", AclOperation.CLUSTER_ACTION),
        (" All ", AclOperation.ALL),
    ],
)
def test_operations_parse_as_kafka_acls_spells_them(text: str, expected: AclOperation) -> None:
    assert AclOperation.parse(text) is expected


def test_other_enums_parse_case_insensitively() -> None:
    assert ResourceType.parse("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert PatternType.parse("prefixed") is PatternType.PREFIXED
    assert AclPermissionType.parse("Deny") is AclPermissionType.DENY
    assert AclOperation.DESCRIBE_CONFIGS.pascal_name == "DescribeConfigs"


@pytest.mark.parametrize("text", ["Reed", "", "Unknown", "describe configs"])
def test_unknown_names_are_one_line_invalid_acl_errors(text: str) -> None:
    with pytest.raises(InvalidAclError) as raised:
        AclOperation.parse(text)
    assert "\n" not in str(raised.value)
    assert "DescribeConfigs" in str(raised.value)
    assert isinstance(raised.value, InvalidRequestError) and isinstance(raised.value, RaybrokerError)


def test_from_code_maps_codes_this_broker_does_not_know_to_unknown() -> None:
    assert ResourceType.from_code(2) is ResourceType.TOPIC
    assert ResourceType.from_code(7) is ResourceType.UNKNOWN
    assert AclOperation.from_code(13) is AclOperation.UNKNOWN


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"resource_type": ResourceType.ANY}, "resource type ANY"),
        ({"resource_type": ResourceType.UNKNOWN}, "resource type UNKNOWN"),
        ({"pattern": PatternType.MATCH}, "pattern type MATCH"),
        ({"pattern": PatternType.ANY}, "pattern type ANY"),
        ({"operation": AclOperation.ANY}, "operation ANY"),
        ({"permission": AclPermissionType.ANY}, "permission type ANY"),
        ({"name": ""}, "resource name"),
        ({"principal": "alice"}, "Type:name"),
        ({"principal": "User:"}, "Type:name"),
        ({"principal": ":alice"}, "Type:name"),
        ({"host": ""}, "host"),
        ({"resource_type": ResourceType.CLUSTER, "name": "other"}, CLUSTER_NAME),
    ],
)
def test_a_binding_refuses_what_kafkas_create_acls_refuses(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidAclError, match=message):
        binding(**changes)  # type: ignore[arg-type]


def test_a_binding_refuses_plain_ints_for_enums() -> None:
    with pytest.raises(InvalidAclError, match="must be a ResourceType"):
        AclBinding(2, "t", LITERAL, "User:a", "*", AclOperation.READ, ALLOW)  # type: ignore[arg-type]


def test_valid_bindings_and_kafkas_texts() -> None:
    cluster = binding(CLUSTER_NAME, resource_type=ResourceType.CLUSTER, operation=AclOperation.IDEMPOTENT_WRITE)
    assert cluster.pattern_text() == "ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)"
    assert binding("*", principal="User:*", host="10.0.0.1").entry_text() == (
        "(principal=User:*, host=10.0.0.1, operation=READ, permissionType=ALLOW)"
    )
    assert binding().to_filter().matches(binding())
    assert AclBindingFilter.ANY.pattern_text() == "ResourcePattern(resourceType=ANY, name=<any>, patternType=ANY)"


def test_a_filter_refuses_unknown_values_and_bad_principals() -> None:
    for field in ("resource_type", "pattern_type", "operation", "permission_type"):
        values = {
            "resource_type": ResourceType.ANY,
            "resource_name": None,
            "pattern_type": PatternType.ANY,
            "principal": None,
            "host": None,
            "operation": AclOperation.ANY,
            "permission_type": AclPermissionType.ANY,
        }
        values[field] = type(values[field]).from_code(0)  # type: ignore[attr-defined]
        with pytest.raises(InvalidAclError, match="UNKNOWN"):
            AclBindingFilter(**values)  # type: ignore[arg-type]
    with pytest.raises(InvalidAclError):
        AclBindingFilter(TOPIC, None, LITERAL, "alice", None, AclOperation.ANY, AclPermissionType.ANY)


# --- matches, against a model of Kafka's rules ------------------------------------------------------------------

NAMES = ["orders", "ord", "orders-eu", "*", "o"]
BINDINGS = [
    binding(name, pattern, principal, host, operation, permission, resource_type)
    for name, pattern, principal, host, operation, permission, resource_type in itertools.product(
        NAMES,
        (LITERAL, PREFIXED),
        ("User:alice", "User:*"),
        ("*", "10.0.0.1"),
        (AclOperation.READ, AclOperation.ALL),
        (ALLOW, DENY),
        (TOPIC, ResourceType.GROUP),
    )
]


def model_matches(f: AclBindingFilter, b: AclBinding) -> bool:
    """Kafka's rules, case by case: a None or ANY field matches anything; MATCH selects the bindings that apply to
    the name (its LITERAL, the LITERAL `*`, a PREFIXED prefix of it); any other pattern type must be equal."""
    if f.resource_type != ResourceType.ANY and f.resource_type != b.resource_type:
        return False
    if f.pattern_type == PatternType.MATCH:
        if f.resource_name is not None:
            if b.pattern_type == LITERAL and b.resource_name not in (f.resource_name, "*"):
                return False
            if b.pattern_type == PREFIXED and not f.resource_name.startswith(b.resource_name):
                return False
    else:
        if f.pattern_type != PatternType.ANY and f.pattern_type != b.pattern_type:
            return False
        if f.resource_name is not None and f.resource_name != b.resource_name:
            return False
    if f.principal is not None and f.principal != b.principal:
        return False
    if f.host is not None and f.host != b.host:
        return False
    if f.operation != AclOperation.ANY and f.operation != b.operation:
        return False
    return f.permission_type == AclPermissionType.ANY or f.permission_type == b.permission_type


@pytest.mark.parametrize("pattern_type", [PatternType.ANY, PatternType.MATCH, LITERAL, PREFIXED])
@pytest.mark.parametrize("resource_name", [None, "orders", "orders-eu-1", "*", "x"])
def test_filter_matches_like_kafka(pattern_type: PatternType, resource_name: str | None) -> None:
    filters = [
        AclBindingFilter(resource_type, resource_name, pattern_type, principal, host, operation, permission)
        for resource_type, principal, host, operation, permission in itertools.product(
            (ResourceType.ANY, TOPIC),
            (None, "User:alice", "User:*"),
            (None, "*"),
            (AclOperation.ANY, AclOperation.READ),
            (AclPermissionType.ANY, DENY),
        )
    ]
    for acl_filter in filters:
        for candidate in BINDINGS:
            assert acl_filter.matches(candidate) == model_matches(acl_filter, candidate), (acl_filter, candidate)


def test_match_selects_the_bindings_that_apply_to_a_name() -> None:
    match = AclBindingFilter(TOPIC, "orders-eu", PatternType.MATCH, None, None, AclOperation.ANY, AclPermissionType.ANY)
    assert match.matches(binding("orders-eu"))
    assert match.matches(binding("*"))
    assert match.matches(binding("orders", PREFIXED))
    assert match.matches(binding("orders-eu", PREFIXED))
    assert not match.matches(binding("orders"))
    assert not match.matches(binding("orders-eu-1", PREFIXED))
    assert not match.matches(binding("*", PREFIXED))
