"""What the listener needs of the cluster metadata the controller keeps beside topics (security, client quotas,
finalized features), written once over a transport.

SCRAM credentials (looked up when a connection authenticates, managed by AlterUserScramCredentials), ACL bindings
(copied into the listener's authorizer, managed by CreateAcls and DeleteAcls), client quotas (copied into the
listener's `QuotaEnforcer`, managed by AlterClientQuotas) and finalized features (copied into the listener's
`FeatureCache` for ApiVersions, managed by UpdateFeatures) live in the controller's metadata log.
`SecurityView` reaches them through a `Transport` (`cluster.protocol.views.transport`): in the controller actor
(`SecurityView.on_ray`, looked up on first use, so a listener that never authenticates or authorizes never needs
it), or in the in-process broker's controller (`SecurityView.in_process`), called on the event loop. Errors are the
typed ones the stores raise. A read that finds the controller it knew gone (`BrokerNotAvailableError`: that actor
died, e.g. with the Ray head, and another runs now) is asked once more of the controller found again, since the
transport forgets an unavailable actor's handle: the first read after a controller's restart is answered, as a Kafka
broker answers from its metadata cache, rather than failed. Writes are not asked twice (one may have been carried
out).
"""

from __future__ import annotations

from typing import Any, Self

from actors.core.controller.controller import Controller
from actors.core.controller.finalized_features import FeatureUpdate
from actors.core.quotas.client_quotas import Entity, FilterComponent, QuotaAlteration
from actors.core.security.acl_bindings import AclBinding, AclBindingFilter
from actors.core.security.scram import ScramCredential
from actors.options import CONTROLLER_NAME
from cluster.protocol.views.transport import EVERY_METHOD, InProcessTransport, RayTransport, Transport
from storage.errors import BrokerNotAvailableError


class SecurityView:
    """The cluster's SCRAM credentials, ACLs, client quotas and finalized features."""

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

    async def _read(self, method: str, *args: object) -> Any:
        """The controller's answer to a read, asked again once if the controller that was asked is gone."""
        try:
            return await self._transport.call(method, *args)
        except BrokerNotAvailableError:
            return await self._transport.call(method, *args)

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for a SCRAM mechanism, or None."""
        return await self._read("scram_credential", user, mechanism)

    async def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        """Every credential: user -> mechanism -> credential."""
        return await self._read("scram_credentials")

    async def upsert_scram_credential(self, user: str, credential: ScramCredential) -> None:
        await self._transport.call("upsert_scram_credential", user, credential)

    async def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        """Deletes one credential; False if the user had none for the mechanism."""
        return await self._transport.call("delete_scram_credential", user, mechanism)

    async def acls_version(self) -> int:
        """A number that changes whenever the ACLs do."""
        return await self._read("acls_version")

    async def acls(self) -> tuple[int, list[AclBinding]]:
        """The ACLs' version and every binding."""
        return await self._read("acls")

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        await self._transport.call("create_acls", bindings)

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Deletes what each filter matches; per filter, the bindings it deleted."""
        return await self._transport.call("delete_acls", filters)

    async def client_quotas_version(self) -> int:
        """A number that changes whenever the client quotas do."""
        return await self._read("client_quotas_version")

    async def client_quotas(self) -> tuple[int, dict[Entity, dict[str, float]]]:
        """The client quotas' version and every entity's values."""
        return await self._read("client_quotas")

    async def describe_client_quotas(
        self, components: list[FilterComponent], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        return await self._read("describe_client_quotas", components, strict)

    async def alter_client_quotas(self, alterations: list[QuotaAlteration], validate_only: bool) -> list[str | None]:
        """Per alteration, None if applied (or valid with `validate_only`), else why it is invalid."""
        return await self._transport.call("alter_client_quotas", alterations, validate_only)

    async def finalized_features(self) -> tuple[int, dict[str, int]]:
        """The finalized features' epoch and levels (none at 0)."""
        return await self._read("finalized_features")

    async def update_features(self, updates: list[FeatureUpdate], validate_only: bool, controller: str) -> None:
        """Every update applied, or none (`InvalidUpdateVersionError`)."""
        await self._transport.call("update_features", updates, validate_only, controller)
