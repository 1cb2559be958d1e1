"""What the listener needs of the cluster's security metadata, as one small asynchronous interface.

SCRAM credentials (looked up when a connection authenticates, managed by AlterUserScramCredentials) and ACL
bindings (copied into the listener's authorizer, managed by CreateAcls and DeleteAcls) live in the controller's
metadata log; `RaySecurityView` reaches them there. Errors are the typed ones the stores raise.
"""

from __future__ import annotations

from typing import Protocol

from actors.core.security.acls import AclBinding, AclBindingFilter
from actors.core.security.scram import ScramCredential


class SecurityView(Protocol):
    """The cluster's SCRAM credentials and ACLs."""

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for a SCRAM mechanism, or None."""
        ...

    async def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        """Every credential: user -> mechanism -> credential."""
        ...

    async def upsert_scram_credential(self, user: str, credential: ScramCredential) -> None: ...

    async def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        """Deletes one credential; False if the user had none for the mechanism."""
        ...

    async def acls_version(self) -> int:
        """A number that changes whenever the ACLs do."""
        ...

    async def acls(self) -> tuple[int, list[AclBinding]]:
        """The ACLs' version and every binding."""
        ...

    async def create_acls(self, bindings: list[AclBinding]) -> None: ...

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Deletes what each filter matches; per filter, the bindings it deleted."""
        ...
