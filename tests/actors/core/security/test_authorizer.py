"""The authorizer (`actors/core/security/authorizer.py`) against brute-force models written straight from Kafka's
rules, on random ACL sets (seeded), and the cases Kafka's own authorizer tests pin by name."""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection

import pytest

from actors.core.security.acl_bindings import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
)
from actors.core.security.authorizer import Authorizer

ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
OPS = [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.ALL)]
ALICE = "User:alice"
BOB = "User:bob"
HOST = "10.0.0.1"
OTHER_HOST = "10.0.0.2"


def acl(
    name: str,
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = LITERAL,
    principal: str = ALICE,
    host: str = "*",
    resource_type: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def model_authorize(
    bindings: list[AclBinding],
    super_users: Collection[str],
    allow_everyone: bool,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """The rules of the brief, one by one, over a plain list."""
    if principal in super_users:
        return True
    on_resource = [
        b
        for b in bindings
        if b.resource_type == resource_type
        and (
            (b.pattern_type == LITERAL and b.resource_name in (name, "*"))
            or (b.pattern_type == PREFIXED and name.startswith(b.resource_name))
        )
    ]
    if not on_resource:
        return allow_everyone
    mine = [b for b in on_resource if b.principal in (principal, "User:*") and b.host in (host, "*")]
    if any(b.permission_type == DENY and b.operation in (operation, AclOperation.ALL) for b in mine):
        return False
    granting = {operation, AclOperation.ALL}
    if operation == AclOperation.DESCRIBE:
        granting |= {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    if operation == AclOperation.DESCRIBE_CONFIGS:
        granting.add(AclOperation.ALTER_CONFIGS)
    return any(b.permission_type == ALLOW and b.operation in granting for b in mine)


def model_by_resource_type(
    bindings: list[AclBinding],
    super_users: Collection[str],
    allow_everyone: bool,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
) -> bool:
    """Kafka's `authorizeByResourceType` as its javadoc tells it: the probe name first, then a wildcard DENY
    refuses, a wildcard ALLOW allows, and an ALLOW allows unless a DENY dominates it (same literal name, or a
    prefix DENY of its name); operations count only when equal or ALL."""
    if model_authorize(bindings, super_users, allow_everyone, principal, host, operation, resource_type, "hardcode"):
        return True
    mine = [
        b
        for b in bindings
        if b.resource_type == resource_type
        and b.principal in (principal, "User:*")
        and b.host in (host, "*")
        and b.operation in (operation, AclOperation.ALL)
    ]
    denies = [b for b in mine if b.permission_type == DENY]
    allows = [b for b in mine if b.permission_type == ALLOW]
    if any(b.pattern_type == LITERAL and b.resource_name == "*" for b in denies):
        return False
    if any(b.pattern_type == LITERAL and b.resource_name == "*" for b in allows):
        return True
    for allow in allows:
        dominated = any(
            (deny.pattern_type == PREFIXED and allow.resource_name.startswith(deny.resource_name))
            or (
                allow.pattern_type == LITERAL
                and deny.pattern_type == LITERAL
                and deny.resource_name == allow.resource_name
            )
            for deny in denies
        )
        if not dominated:
            return True
    return False


NAMES = ["orders", "orders-eu", "ord", "o", "payments", "*", "hard"]
PRINCIPALS = [ALICE, BOB, "User:*"]
HOSTS = ["*", HOST]


def random_bindings(rng: random.Random, count: int) -> list[AclBinding]:
    found = []
    for _ in range(count):
        name = rng.choice(NAMES)
        pattern = LITERAL if name == "*" else rng.choice([LITERAL, PREFIXED])
        operation = rng.choice([AclOperation.ALL, *OPS[:8]])
        found.append(
            acl(
                name,
                operation,
                rng.choice([ALLOW, DENY]),
                pattern,
                rng.choice(PRINCIPALS),
                rng.choice(HOSTS),
                rng.choice([TOPIC, GROUP]),
            )
        )
    return found


@pytest.mark.parametrize("seed", range(40))
def test_authorize_agrees_with_the_model_on_random_acl_sets(seed: int) -> None:
    rng = random.Random(seed)
    bindings = random_bindings(rng, rng.randint(0, 12))
    super_users = {BOB} if seed % 5 == 0 else set()
    for allow_everyone in (False, True):
        authorizer = Authorizer(bindings, super_users, allow_everyone)
        for principal, host, operation, resource_type, name in itertools.product(
            (ALICE, BOB, "User:carol"),
            (HOST, OTHER_HOST),
            OPS,
            (TOPIC, GROUP),
            ("orders", "orders-eu-1", "ord", "payments", "x", "*", "hardcode"),
        ):
            expected = model_authorize(
                bindings, super_users, allow_everyone, principal, host, operation, resource_type, name
            )
            got = authorizer.authorize(principal, host, operation, resource_type, name)
            assert got == expected, (bindings, principal, host, operation, resource_type, name, allow_everyone)
        for principal, host, operation, resource_type in itertools.product(
            (ALICE, BOB, "User:carol"), (HOST, OTHER_HOST), OPS, (TOPIC, GROUP)
        ):
            expected = model_by_resource_type(
                bindings, super_users, allow_everyone, principal, host, operation, resource_type
            )
            got = authorizer.authorize_by_resource_type(principal, host, operation, resource_type)
            assert got == expected, (bindings, principal, host, operation, resource_type, allow_everyone)


def allowed(
    bindings: list[AclBinding],
    operation: AclOperation = AclOperation.READ,
    *,
    principal: str = ALICE,
    host: str = HOST,
    super_users: Collection[str] = (),
    allow_everyone: bool = False,
) -> bool:
    """Whether `principal` from `host` may do `operation` on the topic `orders`."""
    return Authorizer(bindings, super_users, allow_everyone).authorize(principal, host, operation, TOPIC, "orders")


def test_no_acl_on_the_resource_answers_allow_everyone_if_no_acl_found() -> None:
    assert not allowed([])
    assert allowed([], allow_everyone=True)
    other_topic = [acl("payments", principal=BOB)]
    assert allowed(other_topic, allow_everyone=True)
    # An ACL on the resource for someone else: the resource has ACLs, so allow.everyone no longer applies.
    assert not allowed([acl("orders", principal=BOB)], allow_everyone=True)


def test_literal_wildcard_and_prefixed_bindings_apply() -> None:
    assert allowed([acl("orders")])
    assert allowed([acl("*")])
    assert allowed([acl("ord", pattern=PREFIXED)])
    assert allowed([acl("orders", pattern=PREFIXED)])
    assert not allowed([acl("ord")])
    assert not allowed([acl("orders-eu", pattern=PREFIXED)])
    assert not allowed([acl("*", pattern=PREFIXED)])


def test_principal_wildcard_and_host_match() -> None:
    assert allowed([acl("orders", principal="User:*")], principal=BOB)
    assert allowed([acl("orders", host=HOST)])
    assert not allowed([acl("orders", host=HOST)], host=OTHER_HOST)
    assert not allowed([acl("orders")], principal=BOB)


def test_deny_beats_allow_wherever_it_comes_from() -> None:
    assert not allowed([acl("orders"), acl("*", permission=DENY)])
    assert not allowed([acl("*"), acl("ord", pattern=PREFIXED, permission=DENY)])
    assert not allowed([acl("orders", AclOperation.ALL), acl("orders", permission=DENY, principal="User:*")])
    assert not allowed([acl("orders"), acl("orders", AclOperation.ALL, DENY)])
    # A deny for another operation or host does not refuse this one.
    assert allowed([acl("orders"), acl("orders", AclOperation.WRITE, DENY)])
    assert allowed([acl("orders"), acl("orders", permission=DENY, host=OTHER_HOST)])


def test_describe_is_implied_by_allows_but_never_by_denies() -> None:
    for operation in (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER):
        assert allowed([acl("orders", operation)], AclOperation.DESCRIBE)
    assert not allowed([acl("orders", AclOperation.CREATE)], AclOperation.DESCRIBE)
    assert allowed([acl("orders", AclOperation.ALTER_CONFIGS)], AclOperation.DESCRIBE_CONFIGS)
    assert not allowed([acl("orders", AclOperation.DESCRIBE)], AclOperation.READ)
    assert allowed([acl("orders", AclOperation.DESCRIBE), acl("orders", permission=DENY)], AclOperation.DESCRIBE)


def test_super_users_may_do_anything() -> None:
    denied = [acl("*", AclOperation.ALL, DENY, principal="User:*")]
    assert allowed(denied, AclOperation.DELETE, principal="User:admin", super_users={"User:admin"})
    assert not allowed(denied, principal="User:admin")
    authorizer = Authorizer(denied, {"User:admin"}, False)
    assert authorizer.authorize_by_resource_type("User:admin", HOST, AclOperation.WRITE, TOPIC)


def by_type(
    bindings: list[AclBinding], operation: AclOperation = AclOperation.WRITE, allow_everyone: bool = False
) -> bool:
    return Authorizer(bindings, (), allow_everyone).authorize_by_resource_type(ALICE, HOST, operation, TOPIC)


def test_authorize_by_resource_type_like_kafka() -> None:
    write = AclOperation.WRITE
    assert not by_type([])
    assert by_type([], allow_everyone=True)
    assert by_type([acl("t1", write)])
    assert by_type([acl("t1", AclOperation.ALL)])
    assert not by_type([acl("t1", AclOperation.READ)])  # no implied operations here, as Kafka
    assert not by_type([acl("t1", write, principal=BOB)])
    assert by_type([acl("t1", write, principal="User:*")])
    assert not by_type([acl("t1", write, host=OTHER_HOST)])
    assert not by_type([acl("t1", write), acl("t1", write, DENY)])
    assert by_type([acl("t1", write), acl("t2", write, DENY)])
    assert not by_type([acl("t1", write), acl("t", write, DENY, PREFIXED)])
    assert not by_type([acl("t1", write, pattern=PREFIXED), acl("t", write, DENY, PREFIXED)])
    assert by_type([acl("t", write, pattern=PREFIXED), acl("t1", write, DENY, PREFIXED)])
    # A literal deny does not dominate a prefixed allow of the same name: t1x may still be written.
    assert by_type([acl("t1", write, pattern=PREFIXED), acl("t1", write, DENY)])
    assert not by_type([acl("t1", write), acl("*", write, DENY)])
    assert by_type([acl("*", write), acl("t1", write, DENY)])
    # The probe name: a prefixed allow on "hard" allows the probe resource `hardcode` itself.
    assert by_type([acl("hard", write, pattern=PREFIXED)])


def test_authorize_by_resource_type_refuses_filters() -> None:
    authorizer = Authorizer([], (), False)
    with pytest.raises(InvalidAclError):
        authorizer.authorize_by_resource_type(ALICE, HOST, AclOperation.ANY, TOPIC)
    with pytest.raises(InvalidAclError):
        authorizer.authorize_by_resource_type(ALICE, HOST, AclOperation.READ, ResourceType.ANY)


def test_cluster_and_group_resources_are_separate_from_topics() -> None:
    cluster = acl(CLUSTER_NAME, AclOperation.IDEMPOTENT_WRITE, resource_type=ResourceType.CLUSTER)
    authorizer = Authorizer([cluster, acl("g", resource_type=GROUP)], (), False)
    assert authorizer.authorize(ALICE, HOST, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
    assert authorizer.authorize(ALICE, HOST, AclOperation.READ, GROUP, "g")
    assert not authorizer.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "g")
