"""SCRAM credentials and ACLs on a real broker, through the `Admin` facade and the controller actor: typed errors
through Ray, the ACL version, and everything still there after Ray restarts a killed controller."""

from __future__ import annotations

import time
from typing import Any

import pytest
import ray

from actors import Admin
from actors.calls import call
from actors.core.security.acl_bindings import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
)
from actors.core.security.scram import (
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from storage.errors import BrokerNotAvailableError, RequestTimedOutError

pytestmark = pytest.mark.ray

SHA256 = "SCRAM-SHA-256"
SHA512 = "SCRAM-SHA-512"


@pytest.fixture(scope="module")
def admin(start_test_broker: Any) -> Admin:
    # One __consumer_offsets partition (one actor process fewer to start): these tests never use groups.
    broker, _ = start_test_broker(log_dirs_count=1, offsets_topic_num_partitions="1")
    return Admin(broker)


def acl(name: str, principal: str = "User:alice", pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", AclOperation.READ, AclPermissionType.ALLOW)


def test_scram_credentials_through_admin(admin: Admin) -> None:
    admin.upsert_scram_credential("alice", SHA256, "alice-pw")
    admin.upsert_scram_credential("alice", SHA512, "alice-pw", iterations=8192)
    admin.upsert_scram_credential("bob", SHA256, "bob-pw", iterations=5000)
    assert admin.describe_scram_credentials() == {"alice": {SHA256: 4096, SHA512: 8192}, "bob": {SHA256: 5000}}
    assert admin.describe_scram_credentials(["bob"]) == {"bob": {SHA256: 5000}}
    stored = call(admin._controller.scram_credential.remote("alice", SHA512))
    assert stored.verify_password("alice-pw") and not stored.verify_password("bob-pw")
    assert call(admin._controller.scram_credential.remote("carol", SHA256)) is None

    admin.delete_scram_credential("alice", SHA512)
    with pytest.raises(ResourceNotFoundError, match="SCRAM-SHA-512"):
        admin.delete_scram_credential("alice", SHA512)
    admin.delete_scram_credential("bob")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_scram_credential("bob")
    with pytest.raises(ResourceNotFoundError):
        admin.describe_scram_credentials(["bob"])
    with pytest.raises(UnacceptableCredentialError):
        admin.upsert_scram_credential("bob", SHA256, "pw", iterations=100)
    with pytest.raises(UnacceptableCredentialError):
        admin.upsert_scram_credential("", SHA256, "pw")
    with pytest.raises(UnsupportedSaslMechanismError):
        admin.delete_scram_credential("alice", "PLAIN")
    assert admin.describe_scram_credentials() == {"alice": {SHA256: 4096}}


def test_acls_through_admin_and_the_version(admin: Admin) -> None:
    controller = admin._controller
    start = call(controller.acls_version.remote())
    admin.create_acls([acl("orders"), acl("orders", "User:bob"), acl("ord", pattern=PatternType.PREFIXED)])
    version, bindings = call(controller.acls.remote())
    assert version > start and version == call(controller.acls_version.remote())
    assert set(bindings) >= {acl("orders"), acl("orders", "User:bob")}
    admin.create_acls([acl("orders")])
    assert call(controller.acls_version.remote()) == version

    match = AclBindingFilter(
        ResourceType.TOPIC, "orders", PatternType.MATCH, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert set(admin.describe_acls(match)) == {
        acl("orders"),
        acl("orders", "User:bob"),
        acl("ord", pattern=PatternType.PREFIXED),
    }
    assert admin.delete_acls([acl("orders", "User:bob").to_filter()]) == [[acl("orders", "User:bob")]]
    assert call(controller.acls_version.remote()) > version
    with pytest.raises(InvalidAclError):
        admin.create_acls(["User:alice"])  # type: ignore[list-item]
    with pytest.raises(InvalidAclError):
        admin.delete_acls([acl("x")])  # type: ignore[list-item]


def test_credentials_and_acls_survive_a_controller_restart(admin: Admin) -> None:
    admin.upsert_scram_credential("durable", SHA512, "durable-pw", iterations=4097)
    admin.create_acls([acl("durable-topic", "User:durable")])
    admin.delete_acls([acl("never-there").to_filter()])
    before = call(admin._controller.acls.remote())
    credentials = admin.describe_scram_credentials()

    restarts = _restarts(admin._controller)
    ray.kill(admin._controller, no_restart=False)
    deadline = time.monotonic() + 60
    while _restarts(admin._controller) == restarts or not _answers(admin):
        assert time.monotonic() < deadline, "the controller did not come back"
        time.sleep(0.1)

    assert call(admin._controller.acls.remote()) == before
    assert admin.describe_scram_credentials() == credentials
    assert call(admin._controller.scram_credential.remote("durable", SHA512)).verify_password("durable-pw")


def _restarts(handle: Any) -> int:
    """How often Ray restarted the actor, from the GCS actor table (the state API needs the dashboard, which the
    test session turns off)."""
    return int(ray._private.state.actors(actor_id=handle._actor_id.hex())["NumRestarts"])


def _answers(admin: Admin) -> bool:
    try:
        call(admin._controller.acls_version.remote(), timeout_s=5)
    except (BrokerNotAvailableError, RequestTimedOutError):
        return False
    return True
