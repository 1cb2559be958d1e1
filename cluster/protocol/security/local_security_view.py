"""`SecurityView` over the in-process broker's controller, without Ray: SCRAM credentials and ACLs in the
controller's metadata log, as `RaySecurityView` reaches them in the controller actor."""

from __future__ import annotations

from actors.core.controller.controller import Controller
from actors.core.security.acls import AclBinding, AclBindingFilter
from actors.core.security.scram import ScramCredential


class LocalSecurityView:
    """The controller's credentials and ACLs, called in process."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.controller.scram_credential(user, mechanism)

    async def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        return self.controller.scram_credentials()

    async def upsert_scram_credential(self, user: str, credential: ScramCredential) -> None:
        self.controller.upsert_scram_credential(user, credential)

    async def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        return self.controller.delete_scram_credential(user, mechanism)

    async def acls_version(self) -> int:
        return self.controller.acls_version()

    async def acls(self) -> tuple[int, list[AclBinding]]:
        return self.controller.acls()

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        self.controller.create_acls(bindings)

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        return self.controller.delete_acls(filters)
