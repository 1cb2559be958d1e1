"""`SecurityView` over the controller actor, which keeps credentials and ACLs in its metadata log."""

from __future__ import annotations

import asyncio
from typing import Any

from actors.calls import answer, controller
from actors.core.security.acls import AclBinding, AclBindingFilter
from actors.core.security.scram import ScramCredential


class RaySecurityView:
    """The security metadata of the Ray cluster's controller, awaited without blocking the listener's loop. The
    controller is looked up on first use, so a listener that never authenticates or authorizes never needs it."""

    def __init__(self) -> None:
        self._controller: Any = None

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        found: ScramCredential | None = await self._call("scram_credential", user, mechanism)
        return found

    async def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        found: dict[str, dict[str, ScramCredential]] = await self._call("scram_credentials")
        return found

    async def upsert_scram_credential(self, user: str, credential: ScramCredential) -> None:
        await self._call("upsert_scram_credential", user, credential)

    async def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        deleted: bool = await self._call("delete_scram_credential", user, mechanism)
        return deleted

    async def acls_version(self) -> int:
        version: int = await self._call("acls_version")
        return version

    async def acls(self) -> tuple[int, list[AclBinding]]:
        found: tuple[int, list[AclBinding]] = await self._call("acls")
        return found

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        await self._call("create_acls", bindings)

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        deleted: list[list[AclBinding]] = await self._call("delete_acls", filters)
        return deleted

    async def _call(self, method: str, *args: Any) -> Any:
        if self._controller is None:
            self._controller = await asyncio.to_thread(controller)
        return await answer(getattr(self._controller, method).remote(*args))
