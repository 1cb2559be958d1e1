"""The cluster's SCRAM credentials, as the controller keeps them: in memory, and as records of its metadata log.

One record per user and mechanism:

    key    scram/<mechanism>/<user>        e.g. scram/SCRAM-SHA-256/alice
    value  {"mechanism": ..., "salt": <base64>, "stored_key": <base64>, "server_key": <base64>, "iterations": N}

(`ScramCredential.to_json`: never the password); the user is everything after the second `/`, so any UTF-8 name
survives. A deleted credential gets a null value (a tombstone). The store is given the function that appends a
record; it writes before it changes its memory, so what it answers is always on disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actors.core.security.acl_store import WriteRecord
from actors.core.security.scram import (
    ScramCredential,
    UnacceptableCredentialError,
    check_mechanism,
    check_user,
)

SCRAM_KEY_PREFIX = "scram/"


def scram_key(user: str, mechanism: str) -> str:
    return f"{SCRAM_KEY_PREFIX}{mechanism}/{user}"


def parse_scram_key(key: str) -> tuple[str, str]:
    """The (user, mechanism) of a `scram/...` key; `UnacceptableCredentialError` if it is not one."""
    prefix, _, rest = key.partition("/")
    mechanism, _, user = rest.partition("/")
    if prefix + "/" != SCRAM_KEY_PREFIX:
        raise UnacceptableCredentialError(f"not a SCRAM record key: {key!r}")
    return check_user(user), check_mechanism(mechanism)


class ScramCredentialStore:
    """Every SCRAM credential of the cluster, user -> mechanism -> credential; see the module docstring. Not
    thread-safe: the controller's lock serialises its calls."""

    def __init__(self, write: WriteRecord) -> None:
        self._write = write
        self._credentials: dict[str, dict[str, ScramCredential]] = {}

    def load(self, key: str, value: Mapping[str, Any] | None) -> None:
        """Replays the latest record of `key` (a `scram/...` key; None for a tombstone)."""
        user, mechanism = parse_scram_key(key)
        if value is None:
            self._forget(user, mechanism)
            return
        credential = ScramCredential.from_json(value)
        if credential.mechanism != mechanism:
            raise UnacceptableCredentialError(f"record {key!r} holds a {credential.mechanism} credential")
        self._credentials.setdefault(user, {})[mechanism] = credential

    def upsert(self, user: str, credential: ScramCredential) -> None:
        """Sets the user's credential for its mechanism, replacing any earlier one."""
        check_user(user)
        if not isinstance(credential, ScramCredential):
            raise UnacceptableCredentialError(f"not a SCRAM credential: {type(credential).__name__}")
        self._write(scram_key(user, credential.mechanism), credential.to_json())
        self._credentials.setdefault(user, {})[credential.mechanism] = credential

    def delete(self, user: str, mechanism: str) -> bool:
        """Deletes the user's credential for `mechanism`; False if there was none."""
        check_user(user)
        check_mechanism(mechanism)
        if mechanism not in self._credentials.get(user, {}):
            return False
        self._write(scram_key(user, mechanism), None)
        self._forget(user, mechanism)
        return True

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get(user, {}).get(mechanism)

    def credentials(self) -> dict[str, dict[str, ScramCredential]]:
        """A copy: user -> mechanism -> credential."""
        return {user: dict(by_mechanism) for user, by_mechanism in self._credentials.items()}

    def _forget(self, user: str, mechanism: str) -> None:
        by_mechanism = self._credentials.get(user, {})
        by_mechanism.pop(mechanism, None)
        if not by_mechanism:
            self._credentials.pop(user, None)
