"""DescribeUserScramCredentials and AlterUserScramCredentials without sockets, against the in-process controller's
credential store: an upserted SaltedPassword logs in with its password (the store is the oracle), deletions by
mechanism, and Kafka's per-user codes (duplicates, unknown mechanisms, iterations out of range, missing
credentials); no key or salt is ever answered; both need the cluster permission."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.security.acl_bindings import CLUSTER_NAME, AclBinding, AclOperation, AclPermissionType, PatternType
from actors.core.security.acl_bindings import ResourceType as AclResourceType
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.framing import Request, decode_response, encode_response
from cluster.protocol.handlers.scram_credentials import (
    ALTER_USER_SCRAM_CREDENTIALS_KEY,
    DESCRIBE_USER_SCRAM_CREDENTIALS_KEY,
    AlterUserScramCredentialsHandler,
    DescribeUserScramCredentialsHandler,
)
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.security_view import SecurityView
from storage.config.security_config import SecurityConfig
from tests.cluster.protocol.helpers import add_acls, add_user, run

SHA_256, SHA_512 = 1, 2
ALICE = "User:alice"


def open_access(security: SecurityView) -> AccessControl:
    return AccessControl(SecurityConfig(), security)


def ask(handler: Any, api_key: int, values: dict[str, Any], principal: str = ALICE) -> Any:
    body = build(load_request_schema(api_key, 0), values)
    context = ConnectionContext("PLAINTEXT", "PLAINTEXT", "127.0.0.1", principal)
    response = run(handler(Request(api_key, 0, 1, "test", body, context)))
    return decode_response(encode_response(1, response)[4:], load_response_schema(api_key, 0))[1]


def upsertion(user: str, password: str, mechanism: int = SHA_256, iterations: int = 4096) -> dict[str, Any]:
    """What a client sends: SaltedPassword = PBKDF2(password, salt, iterations), never the password."""
    salt = os.urandom(16)
    hash_name = "sha256" if mechanism == SHA_256 else "sha512"
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    return {"name": user, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": salted}


def alter(security: SecurityView, access: AccessControl, deletions: Any = (), upsertions: Any = ()) -> Any:
    values = {"deletions": list(deletions), "upsertions": list(upsertions)}
    answer = ask(AlterUserScramCredentialsHandler(security, access), ALTER_USER_SCRAM_CREDENTIALS_KEY, values)
    return {result.user: result.error_code for result in answer.results}


def describe(security: SecurityView, access: AccessControl, users: list[str] | None) -> Any:
    values = {"users": None if users is None else [{"name": user} for user in users]}
    return ask(DescribeUserScramCredentialsHandler(security, access), DESCRIBE_USER_SCRAM_CREDENTIALS_KEY, values)


def test_an_upserted_salted_password_logs_in_and_is_described_without_secrets(security: SecurityView) -> None:
    access = open_access(security)
    codes = alter(security, access, upsertions=[upsertion("alice", "pa55"), upsertion("bob", "s3cret", SHA_512, 8192)])
    assert codes == {"alice": ErrorCode.none, "bob": ErrorCode.none}
    alice = run(security.scram_credential("alice", "SCRAM-SHA-256"))
    assert alice is not None and alice.verify_password("pa55") and not alice.verify_password("wrong")
    bob = run(security.scram_credential("bob", "SCRAM-SHA-512"))
    assert bob is not None and bob.verify_password("s3cret") and bob.iterations == 8192

    alter(security, access, upsertions=[upsertion("alice", "other", SHA_512, 5000)])
    every = describe(security, access, None)
    assert every.error_code == ErrorCode.none
    assert {r.user: [(i.mechanism, i.iterations) for i in r.credential_infos] for r in every.results} == {
        "alice": [(SHA_256, 4096), (SHA_512, 5000)],
        "bob": [(SHA_512, 8192)],
    }
    named = describe(security, access, ["bob", "nobody", "alice", "alice"])
    assert {r.user: r.error_code for r in named.results} == {
        "bob": ErrorCode.none,
        "nobody": ErrorCode.resource_not_found,
        "alice": ErrorCode.duplicate_resource,
    }
    assert all(r.credential_infos == () for r in named.results if r.user != "bob")


def test_deletions_by_mechanism_and_kafkas_per_user_refusals(broker: InProcessBroker, security: SecurityView) -> None:
    access = open_access(security)
    add_user(broker.controller, "alice", "pa55", "SCRAM-SHA-256")
    add_user(broker.controller, "alice", "pa55", "SCRAM-SHA-512")
    add_user(broker.controller, "carol", "pa55", "SCRAM-SHA-256")
    codes = alter(
        security,
        access,
        deletions=[
            {"name": "alice", "mechanism": SHA_512},
            {"name": "dave", "mechanism": SHA_256},
            {"name": "carol", "mechanism": SHA_256},
            {"name": "erin", "mechanism": 7},
            {"name": "", "mechanism": SHA_256},
        ],
        upsertions=[
            upsertion("carol", "again"),
            upsertion("frank", "few", iterations=4095),
            upsertion("gina", "many", iterations=16385),
            upsertion("hal", "fine"),
            upsertion("hal", "twice"),
            {**upsertion("ivy", "empty"), "salt": b""},
        ],
    )
    assert codes == {
        "alice": ErrorCode.none,
        "dave": ErrorCode.resource_not_found,
        "carol": ErrorCode.duplicate_resource,
        "erin": ErrorCode.unsupported_sasl_mechanism,
        "": ErrorCode.unacceptable_credential,
        "frank": ErrorCode.unacceptable_credential,
        "gina": ErrorCode.unacceptable_credential,
        "hal": ErrorCode.duplicate_resource,
        "ivy": ErrorCode.unacceptable_credential,
    }
    assert {user: sorted(by_mechanism) for user, by_mechanism in run(security.scram_credentials()).items()} == {
        "alice": ["SCRAM-SHA-256"],
        "carol": ["SCRAM-SHA-256"],
    }


def test_describe_needs_describe_and_alter_needs_alter_on_the_cluster(
    broker: InProcessBroker, security: SecurityView
) -> None:
    add_user(broker.controller, "alice", "pa55")
    describer = AclBinding(
        AclResourceType.CLUSTER,
        CLUSTER_NAME,
        PatternType.LITERAL,
        ALICE,
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )
    add_acls(broker.controller, describer)
    properties = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    access = AccessControl(SecurityConfig.from_properties(properties), security)
    run(access.refresh())
    denied = ErrorCode.cluster_authorization_failed
    assert describe(security, access, ["alice"]).results[0].error_code == ErrorCode.none
    codes = alter(
        security, access, deletions=[{"name": "alice", "mechanism": SHA_256}], upsertions=[upsertion("bob", "x")]
    )
    assert codes == {"alice": denied, "bob": denied}
    assert run(security.scram_credential("alice", "SCRAM-SHA-256")) is not None
    nobody = ask(
        DescribeUserScramCredentialsHandler(security, access),
        DESCRIBE_USER_SCRAM_CREDENTIALS_KEY,
        {"users": [{"name": "alice"}]},
        principal="User:mallory",
    )
    assert (nobody.error_code, [r.error_code for r in nobody.results]) == (denied, [denied])
