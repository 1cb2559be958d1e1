"""The controller's SCRAM credential store (`actors/core/security/credential_store.py`) without Ray: upserts and
deletes, what it writes (never a password), and a replayed store that answers the same (a restart)."""

from __future__ import annotations

import pytest

from actors.core.security.credential_store import ScramCredentialStore, parse_scram_key
from actors.core.security.scram import (
    ScramCredential,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from tests.actors.core.security.metadata_log import MetadataLog

SHA256 = "SCRAM-SHA-256"
SHA512 = "SCRAM-SHA-512"


def replayed(log: MetadataLog) -> ScramCredentialStore:
    store = ScramCredentialStore(log.write)
    for key, (_, value) in log.latest("scram/").items():
        store.load(key, value)
    return store


def test_upsert_replace_delete_and_replay() -> None:
    log = MetadataLog()
    store = ScramCredentialStore(log.write)
    alice = ScramCredential.from_password(SHA256, "alice-secret")
    store.upsert("alice", alice)
    store.upsert("alice", ScramCredential.from_password(SHA512, "alice-secret", 8192))
    store.upsert("team/bob é", ScramCredential.from_password(SHA256, "bob-secret"))
    newer = ScramCredential.from_password(SHA256, "alice-new", 5000)
    store.upsert("alice", newer)
    assert store.get("alice", SHA256) == newer
    assert {user: sorted(by) for user, by in store.credentials().items()} == {
        "alice": [SHA256, SHA512],
        "team/bob é": [SHA256],
    }
    assert store.delete("alice", SHA512)
    assert not store.delete("alice", SHA512)
    assert not store.delete("carol", SHA256)
    assert store.delete("team/bob é", SHA256)
    assert store.credentials() == {"alice": {SHA256: newer}}
    assert [key for key, _ in log.records] == [
        "scram/SCRAM-SHA-256/alice",
        "scram/SCRAM-SHA-512/alice",
        "scram/SCRAM-SHA-256/team/bob é",
        "scram/SCRAM-SHA-256/alice",
        "scram/SCRAM-SHA-512/alice",
        "scram/SCRAM-SHA-256/team/bob é",
    ]
    assert all("secret" not in (text or "") and "alice-new" not in (text or "") for _, text in log.records)
    assert replayed(log).credentials() == store.credentials()


def test_credentials_answers_a_copy() -> None:
    store = ScramCredentialStore(MetadataLog().write)
    store.upsert("alice", ScramCredential.from_password(SHA256, "pw"))
    store.credentials()["alice"].clear()
    assert store.get("alice", SHA256) is not None


def test_refuses_empty_users_unknown_mechanisms_and_foreign_records() -> None:
    store = ScramCredentialStore(MetadataLog().write)
    credential = ScramCredential.from_password(SHA256, "pw")
    with pytest.raises(UnacceptableCredentialError, match="non-empty"):
        store.upsert("", credential)
    with pytest.raises(UnacceptableCredentialError):
        store.upsert("alice", "pw")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedSaslMechanismError):
        store.delete("alice", "PLAIN")
    with pytest.raises(UnacceptableCredentialError):
        store.load("scram/SCRAM-SHA-512/alice", credential.to_json())
    with pytest.raises(UnacceptableCredentialError):
        parse_scram_key("acl/TOPIC/LITERAL/x")
    assert parse_scram_key("scram/SCRAM-SHA-512/a/b") == ("a/b", SHA512)
