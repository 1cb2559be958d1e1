"""What the listener needs of the cluster's security metadata, written once over a transport.

SCRAM credentials (looked up when a connection authenticates, managed by AlterUserScramCredentials) and ACL
bindings (copied into the listener's authorizer, managed by CreateAcls and DeleteAcls) live in the controller's
metadata log. `SecurityView` reaches them through a `Transport` (`cluster.protocol.views.transport`): in the
controller actor (`SecurityView.on_ray`, looked up on first use, so a listener that never authenticates or authorizes
never needs it), or in the in-process broker's controller (`SecurityView.in_process`), called on the event loop.
Errors are the typed ones the stores raise.
"""

from __future__ import annotations

from typing import Self

from actors.core.controller.controller import Controller
from actors.core.security.acl_bindings import AclBinding, AclBindingFilter
from actors.core.security.scram import ScramCredential
from actors.options import CONTROLLER_NAME
from cluster.protocol.views.transport import EVERY_METHOD, InProcessTransport, RayTransport, Transport


class SecurityView:
    """The cluster's SCRAM credentials and ACLs."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    @classmethod
    def in_process(cls, controller: Controller) -> Self:
        """The in-process broker's controller."""
        return cls(InProcessTransport(lambda: controller, inline=EVERY_METHOD))

    @classmethod
    def on_ray(cls) -> Self:
        """The controller actor of the Ray cluster this process is connected to."""
        return cls(RayTransport(CONTROLLER_NAME))

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for a SCRAM mechanism, or None."""
        found: ScramCredential | None = await self._transport.call("scram_credential", user, mechanism)
        return found

    async def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        """Every credential: user -> mechanism -> credential."""
        found: dict[str, dict[str, ScramCredential]] = await self._transport.call("scram_credentials")
        return found

    async def upsert_scram_credential(self, user: str, credential: ScramCredential) -> None:
        await self._transport.call("upsert_scram_credential", user, credential)

    async def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        """Deletes one credential; False if the user had none for the mechanism."""
        deleted: bool = await self._transport.call("delete_scram_credential", user, mechanism)
        return deleted

    async def acls_version(self) -> int:
        """A number that changes whenever the ACLs do."""
        version: int = await self._transport.call("acls_version")
        return version

    async def acls(self) -> tuple[int, list[AclBinding]]:
        """The ACLs' version and every binding."""
        found: tuple[int, list[AclBinding]] = await self._transport.call("acls")
        return found

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        await self._transport.call("create_acls", bindings)

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Deletes what each filter matches; per filter, the bindings it deleted."""
        deleted: list[list[AclBinding]] = await self._transport.call("delete_acls", filters)
        return deleted
