"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka stores them: never the password, only what a server needs.

From a password, a random salt and an iteration count i:

    SaltedPassword = Hi(password, salt, i)            PBKDF2 with HMAC-H (H = SHA-256 or SHA-512)
    ClientKey      = HMAC(SaltedPassword, "Client Key")
    StoredKey      = H(ClientKey)
    ServerKey      = HMAC(SaltedPassword, "Server Key")

A credential keeps (salt, StoredKey, ServerKey, i): enough to check a client's proof and to sign the server's
answer, not enough to log in as the user. The password's bytes are its UTF-8 encoding, with no SASLprep, as
Kafka's `ScramFormatter` does (so an ASCII password gives the same keys as any RFC 5802 implementation).
SASL PLAIN checks a password against the same credential (`verify_password`), as Kafka's SCRAM store lets it.

Kafka's mechanisms take 4096 to 16384 iterations; their wire codes are those of AlterUserScramCredentials and
DescribeUserScramCredentials. A credential is persisted as a JSON object with base64 byte fields (`to_json`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage.errors import RaybrokerError

SCRAM_MECHANISMS: Mapping[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
# 256 random bits per salt: no two credentials share one in practice (Kafka's own salts carry 130 random bits).
SALT_BYTES = 32


class UnsupportedSaslMechanismError(RaybrokerError):
    """A SASL or SCRAM mechanism this broker does not offer (UNSUPPORTED_SASL_MECHANISM)."""


class UnacceptableCredentialError(RaybrokerError):
    """A SCRAM credential Kafka refuses: an empty user name, iterations outside 4096..16384, an empty salt or
    password (UNACCEPTABLE_CREDENTIAL)."""


class ResourceNotFoundError(RaybrokerError):
    """Deleting a SCRAM credential that does not exist (RESOURCE_NOT_FOUND)."""


def check_mechanism(mechanism: object) -> str:
    """`mechanism` if it is a SCRAM mechanism of Kafka's, else `UnsupportedSaslMechanismError`."""
    if not isinstance(mechanism, str) or mechanism not in SCRAM_MECHANISMS:
        raise UnsupportedSaslMechanismError(
            f"unknown SCRAM mechanism {mechanism!r}; expected one of {', '.join(SCRAM_MECHANISMS)}"
        )
    return mechanism


def check_user(user: object) -> str:
    """`user` if it is a non-empty string (Kafka takes any UTF-8 name), else `UnacceptableCredentialError`."""
    if not isinstance(user, str) or not user:
        raise UnacceptableCredentialError(f"a SCRAM user name must be a non-empty string, got {user!r}")
    return user


@dataclass(frozen=True, slots=True, repr=False)
class ScramCredential:
    """One user's credential for one mechanism; see the module docstring. Checked when built."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        check_mechanism(self.mechanism)
        _check_iterations(self.mechanism, self.iterations)
        size = hashlib.new(_HASHES[self.mechanism]).digest_size
        for field in ("salt", "stored_key", "server_key"):
            value = getattr(self, field)
            if not isinstance(value, bytes) or not value:
                raise UnacceptableCredentialError(f"{field} must be non-empty bytes")
            if field != "salt" and len(value) != size:
                raise UnacceptableCredentialError(f"{field} must be {size} bytes for {self.mechanism}")

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """The credential of a SaltedPassword a client computed (AlterUserScramCredentials carries it)."""
        hash_name = _HASHES[check_mechanism(mechanism)]
        client_key = hmac.digest(salted_password, b"Client Key", hash_name)
        stored_key = hashlib.new(hash_name, client_key).digest()
        server_key = hmac.digest(salted_password, b"Server Key", hash_name)
        return cls(mechanism, salt, stored_key, server_key, iterations)

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
    ) -> ScramCredential:
        """The credential of `password` with `salt` (default: SALT_BYTES fresh random bytes)."""
        check_mechanism(mechanism)
        if not isinstance(password, str) or not password:
            raise UnacceptableCredentialError("a SCRAM password must be a non-empty string")
        salt = os.urandom(SALT_BYTES) if salt is None else salt
        if not isinstance(salt, bytes) or not salt:
            raise UnacceptableCredentialError("salt must be non-empty bytes")
        # Checked before hashing too: PBKDF2 with an unchecked count could run for hours.
        _check_iterations(mechanism, iterations)
        salted = _salted_password(mechanism, password, salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def verify_password(self, password: str) -> bool:
        """Whether `password` is this credential's (SASL PLAIN), compared in constant time."""
        if not isinstance(password, str):
            return False
        salted = _salted_password(self.mechanism, password, self.salt, self.iterations)
        candidate = ScramCredential.from_salted_password(self.mechanism, self.salt, salted, self.iterations)
        return hmac.compare_digest(candidate.stored_key, self.stored_key)

    def to_json(self) -> dict[str, Any]:
        """The credential as a JSON object (bytes in base64), as the controller's metadata log stores it."""
        return {
            "mechanism": self.mechanism,
            "salt": base64.b64encode(self.salt).decode("ascii"),
            "stored_key": base64.b64encode(self.stored_key).decode("ascii"),
            "server_key": base64.b64encode(self.server_key).decode("ascii"),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ScramCredential:
        """The credential `to_json` wrote; `UnacceptableCredentialError` for anything else."""
        try:
            return cls(
                body["mechanism"],
                base64.b64decode(body["salt"], validate=True),
                base64.b64decode(body["stored_key"], validate=True),
                base64.b64decode(body["server_key"], validate=True),
                body["iterations"],
            )
        except (KeyError, TypeError, binascii.Error) as exc:
            raise UnacceptableCredentialError(f"not a stored SCRAM credential: {type(exc).__name__}: {exc}") from exc

    def __repr__(self) -> str:
        return f"ScramCredential(mechanism={self.mechanism!r}, iterations={self.iterations})"


def _check_iterations(mechanism: str, iterations: object) -> None:
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise UnacceptableCredentialError(f"iterations must be an int, got {type(iterations).__name__}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"{iterations} iterations is outside {MIN_ITERATIONS}..{MAX_ITERATIONS} for {mechanism}"
        )


def _salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 with HMAC of the mechanism's hash, one hash length of output."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode("utf-8"), salt, iterations)
