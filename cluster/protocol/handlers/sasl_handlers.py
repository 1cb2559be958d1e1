"""SaslHandshake (key 17) and SaslAuthenticate (key 36): authenticating a connection on a SASL listener.

SaslHandshake names a mechanism; the answer lists the listener's `sasl.enabled.mechanisms`. An unknown mechanism
is answered UNSUPPORTED_SASL_MECHANISM (33) and the connection closed. Only v1 is served: v0 meant raw SASL
tokens outside Kafka's framing, which no current client sends once SaslAuthenticate is offered. SaslAuthenticate
then carries each token of the mechanism's exchange (`cluster.protocol.security.sasl`); success sets the
connection's principal, failure answers SASL_AUTHENTICATION_FAILED (58) with a message that names no secret, and
the connection is closed after `connection.failed.authentication.delay.ms`, so a client guessing passwords gets
one guess per delay and connection. Either request out of turn (on a listener without SASL, twice, or after the
connection authenticated) is ILLEGAL_SASL_STATE (34); on a SASL listener that also closes the connection.
`session_lifetime_ms` is 0: raybroker does not ask clients to re-authenticate (`connections.max.reauth.ms`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.protocol.error_codes import SaslFailure
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.messages import build
from cluster.protocol.security.sasl import AuthenticationError, CredentialLookup, SaslExchange
from storage.config.security_config import SASL_PROTOCOLS

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36


class SaslHandshakeHandler:
    """Answers SaslHandshake (see the module docstring)."""

    def __init__(self, enabled_mechanisms: Collection[str], credentials: CredentialLookup) -> None:
        self._mechanisms = list(enabled_mechanisms)
        self._credentials = credentials

    async def __call__(self, request: Request) -> Any:
        context = request.context
        mechanism = request.body.mechanism
        if context.security_protocol not in SASL_PROTOCOLS:
            return self._answer(request, ErrorCode.illegal_sasl_state, [])
        if context.authenticated or context.sasl is not None:
            raise SaslFailure(
                "SaslHandshake out of turn", self._answer(request, ErrorCode.illegal_sasl_state, self._mechanisms)
            )
        if mechanism not in self._mechanisms:
            raise SaslFailure(
                f"unsupported SASL mechanism {mechanism!r}",
                self._answer(request, ErrorCode.unsupported_sasl_mechanism, self._mechanisms),
            )
        context.sasl = SaslExchange(mechanism, self._credentials)
        return self._answer(request, ErrorCode.none, self._mechanisms)

    def _answer(self, request: Request, code: ErrorCode, mechanisms: list[str]) -> Any:
        return build(
            response_schema(SASL_HANDSHAKE_KEY, request.api_version),
            {"error_code": code, "mechanisms": mechanisms},
        )


class SaslAuthenticateHandler:
    """Answers SaslAuthenticate (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        context = request.context
        exchange = context.sasl
        if context.security_protocol not in SASL_PROTOCOLS:
            return _answer(request, ErrorCode.illegal_sasl_state, "this listener does not use SASL")
        if context.authenticated or not isinstance(exchange, SaslExchange):
            raise SaslFailure(
                "SaslAuthenticate out of turn",
                _answer(request, ErrorCode.illegal_sasl_state, "SaslAuthenticate without a SaslHandshake first"),
            )
        try:
            token = await exchange.step(bytes(request.body.auth_bytes))
        except AuthenticationError as exc:
            context.sasl = None
            raise SaslFailure(str(exc), _answer(request, ErrorCode.sasl_authentication_failed, str(exc))) from None
        if exchange.complete:
            assert exchange.principal is not None, "a complete exchange names its principal"
            context.principal = exchange.principal
            context.authenticated = True
            context.sasl = None
        return _answer(request, ErrorCode.none, None, token)


def _answer(request: Request, code: ErrorCode, message: str | None, token: bytes = b"") -> Any:
    return build(
        response_schema(SASL_AUTHENTICATE_KEY, request.api_version),
        {"error_code": code, "error_message": message, "auth_bytes": token, "session_lifetime_ms": 0},
    )
