"""What a request knows of the connection it came on, as Kafka's `RequestContext` holds it.

Every connection gets one `ConnectionContext` when it is accepted: the listener's name and security protocol, the
client's address, and the principal the handlers authorize. On PLAINTEXT and SSL listeners the principal is known
from the start (`User:ANONYMOUS`, or the subject of a client certificate); on SASL listeners the connection starts
unauthenticated, only ApiVersions, SaslHandshake and SaslAuthenticate are served until SaslAuthenticate succeeds,
and that success sets the principal. Only the SASL handlers change a context, and only on their own connection.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from storage.config.security_config import SASL_PROTOCOLS

ANONYMOUS = "User:ANONYMOUS"
# Numbers each connection of this process (Kafka's connection id): what share sessions are tied to.
_connection_ids = itertools.count(1)


@dataclass(slots=True)
class ConnectionContext:
    """One connection's listener, client address and principal (see the module docstring). `sasl` holds the
    SASL exchange in progress: its mechanism's server state between SaslAuthenticate rounds. Once a client quota
    applies to the connection (`cluster.protocol.quota_enforcer`), `quota_bound` makes the server handle its
    requests one at a time, as Kafka handles every connection's, and `muted_until` (`time.monotonic()` seconds) is
    when a throttled connection may send again: the server reads none of its requests before. `connection_id` is
    the connection's number, unique in this process."""

    listener_name: str
    security_protocol: str
    client_host: str
    principal: str = ANONYMOUS
    authenticated: bool = True
    sasl: Any = None
    quota_bound: bool = False
    muted_until: float = 0.0
    connection_id: int = field(default_factory=lambda: next(_connection_ids))

    @classmethod
    def unnamed(cls) -> ConnectionContext:
        """An anonymous PLAINTEXT connection from nowhere: a request decoded outside a listener."""
        return cls("PLAINTEXT", "PLAINTEXT", "")

    @classmethod
    def accepted(
        cls, listener_name: str, security_protocol: str, client_host: str, principal: str | None = None
    ) -> ConnectionContext:
        """The context of a connection just accepted: unauthenticated on a SASL listener, else authenticated as
        `principal` (a client certificate's) or ANONYMOUS."""
        return cls(
            listener_name,
            security_protocol,
            client_host,
            principal or ANONYMOUS,
            authenticated=security_protocol not in SASL_PROTOCOLS,
        )
