"""The authorizer the handlers ask, as the listener keeps it: Kafka's ACL semantics over a cached copy of the ACLs.

With `authorizer.class.name` unset every request is allowed, as on a Kafka broker without an authorizer. With it
set, each question goes to an `actors.core.security.authorizer.Authorizer` built from the cluster's bindings,
`super.users` and `allow.everyone.if.no.acl.found`, about the connection's principal and client address. Asking
the controller on every request would put an actor round trip in front of every Produce, so the listener keeps a
copy: `refresh` reloads it when the controller's ACL version moved, which the listener checks every
`REFRESH_INTERVAL_S` and right after this listener changed ACLs. A change made elsewhere (the CLI, another
listener) therefore applies here within that interval, as Kafka's brokers apply ACLs once their metadata catches
up. Until the first load succeeds nothing but super users is allowed.
"""

from __future__ import annotations

from actors.core.security.acl_bindings import AclOperation, ResourceType
from actors.core.security.authorizer import Authorizer
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.refreshing import refresh_every
from cluster.protocol.views.security_view import SecurityView
from storage.config.security_config import SecurityConfig

REFRESH_INTERVAL_S = 0.5


class AccessControl:
    """Answers "may this connection do this?" (see the module docstring)."""

    def __init__(self, config: SecurityConfig, view: SecurityView) -> None:
        self.enabled = config.authorizer_enabled
        self._config = config
        self._view = view
        self._version: int | None = None
        self._authorizer = Authorizer([], config.super_user_principals, allow_everyone_if_no_acl_found=False)

    def allows(
        self, context: ConnectionContext, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether the connection's principal may do `operation` on the named resource."""
        if not self.enabled:
            return True
        return self._authorizer.authorize(context.principal, context.client_host, operation, resource_type, name)

    def allows_any(self, context: ConnectionContext, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on some resource of the type (Kafka's
        `authorizeByResourceType`)."""
        if not self.enabled:
            return True
        return self._authorizer.authorize_by_resource_type(
            context.principal, context.client_host, operation, resource_type
        )

    async def refresh(self) -> None:
        """Reloads the ACLs if the controller's copy changed since the last load."""
        if not self.enabled or (self._version is not None and await self._view.acls_version() == self._version):
            return
        version, bindings = await self._view.acls()
        self._authorizer = Authorizer(
            bindings, self._config.super_user_principals, self._config.allow_everyone_if_no_acl_found
        )
        self._version = version

    async def keep_fresh(self) -> None:
        """Refreshes every `REFRESH_INTERVAL_S` until cancelled; a failed refresh keeps the last copy."""
        await refresh_every(self.refresh, REFRESH_INTERVAL_S, "ACLs")
