"""The controller's ACL store (`actors/core/security/acl_store.py`) without Ray: create and delete against a set
oracle, what it writes to the metadata log, and a replayed store that answers the same (a restart)."""

from __future__ import annotations

import random

import pytest

from actors.core.security.acl_bindings import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
)
from actors.core.security.acl_store import AclStore, parse_acl_key
from tests.actors.core.security.metadata_log import MetadataLog

ANY_OP = AclOperation.ANY
ANY_PERMISSION = AclPermissionType.ANY


def acl(
    name: str = "orders",
    principal: str = "User:alice",
    operation: AclOperation = AclOperation.READ,
    pattern: PatternType = PatternType.LITERAL,
    resource_type: ResourceType = ResourceType.TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)


def replayed(log: MetadataLog) -> AclStore:
    store = AclStore(log.write)
    for key, (offset, value) in log.latest("acl/").items():
        store.load(key, value, offset)
    return store


def test_create_is_idempotent_and_writes_one_record_per_resource_pattern() -> None:
    log = MetadataLog()
    store = AclStore(log.write)
    assert store.version == 0
    store.create([acl(), acl(principal="User:bob"), acl("orders", pattern=PatternType.PREFIXED)])
    assert [key for key, _ in log.records] == ["acl/TOPIC/LITERAL/orders", "acl/TOPIC/PREFIXED/orders"]
    version = store.version
    assert version == 2
    store.create([acl(), acl()])
    assert len(log.records) == 2 and store.version == version
    assert store.bindings() == [acl(), acl(principal="User:bob"), acl("orders", pattern=PatternType.PREFIXED)]
    assert '"operation": "READ"' in (log.records[0][1] or "")


def test_delete_answers_per_filter_and_tombstones_an_emptied_pattern() -> None:
    log = MetadataLog()
    store = AclStore(log.write)
    store.create([acl(), acl(principal="User:bob"), acl("payments")])
    by_alice = AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, "User:alice", None, ANY_OP, ANY_PERMISSION)
    on_payments = AclBindingFilter(
        ResourceType.TOPIC, "payments", PatternType.LITERAL, None, None, ANY_OP, ANY_PERMISSION
    )
    nothing = AclBindingFilter(ResourceType.GROUP, None, PatternType.ANY, None, None, ANY_OP, ANY_PERMISSION)
    before = store.version
    assert store.delete([by_alice, on_payments, nothing]) == [[acl(), acl("payments")], [acl("payments")], []]
    assert store.bindings() == [acl(principal="User:bob")]
    assert log.records[-2:] == [
        ("acl/TOPIC/LITERAL/orders", log.records[-2][1]),
        ("acl/TOPIC/LITERAL/payments", None),
    ]
    assert store.version > before
    assert store.delete([by_alice]) == [[]]
    assert store.version == before + 2


def test_a_replayed_store_holds_the_same_bindings_and_version() -> None:
    log = MetadataLog()
    store = AclStore(log.write)
    store.create([acl("a/b", resource_type=ResourceType.GROUP), acl(), acl("t", pattern=PatternType.PREFIXED)])
    store.delete([acl().to_filter()])
    again = replayed(log)
    assert sorted(map(repr, again.bindings())) == sorted(map(repr, store.bindings()))
    assert again.version == store.version == len(log.records)


def test_random_creates_and_deletes_agree_with_a_set_oracle_and_survive_replay() -> None:
    rng = random.Random(7)
    log = MetadataLog()
    store = AclStore(log.write)
    oracle: set[AclBinding] = set()
    universe = [
        acl(name, principal, operation, pattern)
        for name in ("a", "ab", "b", "*")
        for principal in ("User:alice", "User:bob")
        for operation in (AclOperation.READ, AclOperation.WRITE)
        for pattern in (PatternType.LITERAL, PatternType.PREFIXED)
    ]
    for _ in range(200):
        if rng.random() < 0.6:
            batch = rng.sample(universe, rng.randint(1, 4))
            store.create(batch)
            oracle.update(batch)
        else:
            acl_filter = AclBindingFilter(
                ResourceType.TOPIC,
                rng.choice([None, "a", "ab", "*"]),
                rng.choice(list(PatternType)[1:]),
                rng.choice([None, "User:alice"]),
                None,
                rng.choice([ANY_OP, AclOperation.READ]),
                ANY_PERMISSION,
            )
            expected = {b for b in oracle if acl_filter.matches(b)}
            (deleted,) = store.delete([acl_filter])
            assert set(deleted) == expected and len(deleted) == len(expected)
            oracle -= expected
        assert set(store.bindings()) == oracle and len(store.bindings()) == len(oracle)
    assert set(replayed(log).bindings()) == oracle


def test_store_refuses_what_is_not_a_binding_or_filter() -> None:
    store = AclStore(MetadataLog().write)
    with pytest.raises(InvalidAclError):
        store.create(["User:alice"])  # type: ignore[list-item]
    with pytest.raises(InvalidAclError):
        store.delete([acl()])  # type: ignore[list-item]
    with pytest.raises(InvalidAclError):
        parse_acl_key("topic/orders")
    assert parse_acl_key("acl/GROUP/PREFIXED/a/b") == (ResourceType.GROUP, PatternType.PREFIXED, "a/b")
