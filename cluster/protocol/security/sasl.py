"""The server side of the SASL mechanisms a SASL listener offers: SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN.

A connection runs one `SaslExchange` from SaslHandshake (which picks the mechanism) until it succeeds or fails;
each SaslAuthenticate round hands it the client's token and sends back its answer.
- SCRAM (RFC 5802, through `scramp`): two rounds. The client's first message names the user; the user's stored
  credential (salt, StoredKey, ServerKey, iterations) is looked up; the server's first message carries the salt,
  the iterations and a fresh nonce; the client's final message must prove the password for that nonce, so a
  proof recorded from another exchange (a replay) fails. The password never reaches the broker.
- PLAIN (RFC 4616): one round, `authzid NUL user NUL password`; the password is checked against the user's SCRAM
  credential (either mechanism), as Kafka's SCRAM credential store lets PLAIN do. An authorization id other than
  the user is refused, as Kafka's PLAIN server refuses it. Only use PLAIN over TLS: the password crosses the wire.

Any failure raises `AuthenticationError`, whose message is safe to log and to send (it names the user and the
mechanism, never a password, proof or key); the listener answers SASL_AUTHENTICATION_FAILED and closes. A user
without a credential fails exactly like a wrong password, so the answer does not tell which users exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from scramp import ScramException, ScramMechanism

from actors.core.security.scram import SCRAM_MECHANISMS, ScramCredential
from storage.config.security_config import PLAIN

# (user, mechanism) -> the user's credential for that SCRAM mechanism, or None.
CredentialLookup = Callable[[str, str], Awaitable[ScramCredential | None]]


class AuthenticationError(Exception):
    """A failed SASL exchange; the message holds nothing secret."""


class SaslExchange:
    """One connection's exchange for one mechanism: `step` each client token; `principal` once `complete`."""

    def __init__(self, mechanism: str, credentials: CredentialLookup) -> None:
        self.mechanism = mechanism
        self.principal: str | None = None
        self._credentials = credentials
        self._scram = ScramMechanism(mechanism) if mechanism in SCRAM_MECHANISMS else None
        self._server: Any = None
        self._user = ""

    @property
    def complete(self) -> bool:
        return self.principal is not None

    async def step(self, token: bytes) -> bytes:
        """The answer to the client's next token; `AuthenticationError` when the exchange fails."""
        if self.complete:
            raise AuthenticationError(f"the {self.mechanism} exchange is already complete")
        if self.mechanism == PLAIN:
            return await self._plain(token)
        return await self._scram_step(token)

    def _failed(self) -> AuthenticationError:
        return AuthenticationError(
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{self.mechanism}" + (f" (user {self._user!r})" if self._user else "")
        )

    async def _plain(self, token: bytes) -> bytes:
        try:
            authzid, user, password = token.decode("utf-8").split("\0")
        except ValueError:
            raise AuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens") from None
        if not user or not password:
            raise AuthenticationError("Authentication failed: username or password not specified")
        if authzid and authzid != user:
            raise AuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._user = user
        for mechanism in SCRAM_MECHANISMS:
            credential = await self._credentials(user, mechanism)
            # PBKDF2 runs thousands of HMACs: off the event loop, which serves every other connection.
            if credential is not None and await asyncio.to_thread(credential.verify_password, password):
                self.principal = f"User:{user}"
                return b""
        raise self._failed()

    async def _scram_step(self, token: bytes) -> bytes:
        assert self._scram is not None, "a SCRAM exchange has its mechanism"
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationError(f"Invalid {self.mechanism} message: not UTF-8") from None
        if self._server is None:
            return await self._client_first(self._scram, message)
        server = self._server
        try:
            server.set_client_final(message)
            final: str = server.get_server_final()
        except ScramException:
            raise self._failed() from None
        self.principal = f"User:{self._user}"
        return final.encode("utf-8")

    async def _client_first(self, scram: ScramMechanism, message: str) -> bytes:
        self._user = _scram_user(message)
        if not self._user:
            raise AuthenticationError(f"Invalid {self.mechanism} client-first message: no user name")
        credential = await self._credentials(self._user, self.mechanism)
        if credential is None:
            raise self._failed()
        auth_info = (credential.salt, credential.stored_key, credential.server_key, credential.iterations)
        server = scram.make_server(lambda _user: auth_info)
        try:
            server.set_client_first(message)
            first: str = server.get_server_first()
        except ScramException as exc:
            raise AuthenticationError(f"Invalid {self.mechanism} client-first message: {exc}") from None
        self._server = server
        return first.encode("utf-8")


def _scram_user(client_first: str) -> str:
    """The user a SCRAM client-first message names (`gs2-header n=<saslname>,r=...`), `=2C` and `=3D` unescaped;
    "" when it names none."""
    parts = client_first.split(",")
    for attribute in parts[2:]:
        if attribute.startswith("n="):
            return attribute[2:].replace("=2C", ",").replace("=3D", "=")
    return ""
