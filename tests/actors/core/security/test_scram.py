"""SCRAM credentials (`actors/core/security/scram.py`) against scramp, an independent RFC 5802 implementation:
the same keys from the same password and salt, and a full client/server exchange over our stored keys."""

from __future__ import annotations

import hashlib

import pytest
import scramp

from actors.core.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from storage.errors import RaybrokerError

MECHANISMS = sorted(SCRAM_MECHANISMS)
SALT = b"0123456789abcdef0123456789abcdef"


def test_mechanism_codes_and_bounds_are_kafkas() -> None:
    assert dict(SCRAM_MECHANISMS) == {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
    assert (MIN_ITERATIONS, MAX_ITERATIONS) == (4096, 16384)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("iterations", [4096, 8192])
@pytest.mark.parametrize("password", ["pencil", "a much longer pass phrase with spaces, digits 0123 and :;"])
def test_keys_from_a_password_are_scramps(mechanism: str, iterations: int, password: str) -> None:
    salt, stored_key, server_key, count = scramp.ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=SALT
    )
    credential = ScramCredential.from_password(mechanism, password, iterations, salt=SALT)
    assert (credential.salt, credential.stored_key, credential.server_key, credential.iterations) == (
        salt,
        stored_key,
        server_key,
        count,
    )


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_keys_from_a_salted_password_match_keys_from_the_password(mechanism: str) -> None:
    hash_name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salted = hashlib.pbkdf2_hmac(hash_name, b"pencil", SALT, 4096)
    assert ScramCredential.from_salted_password(mechanism, SALT, salted, 4096) == ScramCredential.from_password(
        mechanism, "pencil", salt=SALT
    )


def exchange(mechanism: str, credential: ScramCredential, user: str, password: str) -> None:
    """A full SCRAM exchange: scramp's client with `password` against scramp's server holding `credential`."""

    def auth_fn(username: str) -> tuple[bytes, bytes, bytes, int]:
        assert username == user
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    client = scramp.ScramClient([mechanism], user, password)
    server = scramp.ScramMechanism(mechanism).make_server(auth_fn)
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    server.set_client_final(client.get_client_final())
    client.set_server_final(server.get_server_final())


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_scramp_client_logs_in_with_our_stored_keys(mechanism: str) -> None:
    credential = ScramCredential.from_password(mechanism, "s3cret", 4096)
    exchange(mechanism, credential, "alice", "s3cret")
    with pytest.raises(scramp.ScramException):
        exchange(mechanism, credential, "alice", "wrong")


def test_random_salts_differ_and_verify_password_checks_the_password() -> None:
    first = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    second = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    assert first.salt != second.salt and len(first.salt) >= 16
    assert first.stored_key != second.stored_key
    assert first.verify_password("pw") and second.verify_password("pw")
    assert not first.verify_password("pw ")
    assert not first.verify_password("")


def test_json_round_trip_and_repr_hide_the_keys() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-512", "pw", 5000, salt=SALT)
    body = credential.to_json()
    assert ScramCredential.from_json(body) == credential
    assert body["iterations"] == 5000 and "pw" not in str(body.values())
    text = repr(credential)
    assert text == "ScramCredential(mechanism='SCRAM-SHA-512', iterations=5000)"
    for secret in (credential.salt, credential.stored_key, credential.server_key):
        assert secret.hex() not in text and repr(secret) not in text
    assert str(credential) == text


@pytest.mark.parametrize(
    "body",
    [{}, {"mechanism": "SCRAM-SHA-256", "salt": "!!", "stored_key": "", "server_key": "", "iterations": 4096}],
)
def test_from_json_refuses_what_to_json_never_writes(body: dict[str, object]) -> None:
    with pytest.raises(UnacceptableCredentialError):
        ScramCredential.from_json(body)


@pytest.mark.parametrize("iterations", [4095, 16385, 0, -1, True, 4096.0])
def test_iterations_outside_kafkas_bounds_are_unacceptable(iterations: object) -> None:
    with pytest.raises(UnacceptableCredentialError) as raised:
        ScramCredential.from_password("SCRAM-SHA-256", "pw", iterations)  # type: ignore[arg-type]
    assert isinstance(raised.value, RaybrokerError)
    with pytest.raises(UnacceptableCredentialError):
        ScramCredential.from_salted_password("SCRAM-SHA-256", SALT, b"x" * 32, iterations)  # type: ignore[arg-type]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-1", "PLAIN", "scram-sha-256", ""])
def test_unknown_mechanisms_are_unsupported(mechanism: str) -> None:
    with pytest.raises(UnsupportedSaslMechanismError, match="SCRAM-SHA-256, SCRAM-SHA-512"):
        ScramCredential.from_password(mechanism, "pw")


def test_an_empty_password_or_salt_and_wrong_key_sizes_are_unacceptable() -> None:
    with pytest.raises(UnacceptableCredentialError):
        ScramCredential.from_password("SCRAM-SHA-256", "")
    with pytest.raises(UnacceptableCredentialError):
        ScramCredential.from_password("SCRAM-SHA-256", "pw", salt=b"")
    with pytest.raises(UnacceptableCredentialError, match="32 bytes"):
        ScramCredential("SCRAM-SHA-256", SALT, b"k" * 64, b"k" * 32, 4096)
