"""A listener's copy of the cluster's finalized features, which ApiVersions answers from.

ApiVersions opens every connection, and must be answered while the controller is away (a Kafka broker answers it
from its metadata cache): the listener keeps the controller's finalized features (`actors.core.controller.
finalized_features`) and refreshes them every `REFRESH_INTERVAL_S` from its start (which does not wait for the first
copy: a listener starting beside a controller that is busy starting too serves at once), and right after this
listener's UpdateFeatures. Until a first copy arrives, ApiVersions answers the supported features with no finalized
ones and epoch -1 (Kafka's "unknown"); a refresh that fails keeps the last copy.
"""

from __future__ import annotations

from actors.core.controller.finalized_features import UNKNOWN_EPOCH
from cluster.protocol.refreshing import refresh_every
from cluster.protocol.views.security_view import SecurityView

REFRESH_INTERVAL_S = 1.0


class FeatureCache:
    """The listener's copy of the finalized features; see the module docstring."""

    def __init__(self, view: SecurityView) -> None:
        self._view = view
        self._epoch = UNKNOWN_EPOCH
        self._levels: dict[str, int] = {}

    def current(self) -> tuple[int, dict[str, int]]:
        """The epoch and levels of the last copy."""
        return self._epoch, self._levels

    async def refresh(self) -> None:
        """Copies the controller's finalized features."""
        self._epoch, self._levels = await self._view.finalized_features()

    async def keep_fresh(self) -> None:
        """Refreshes every `REFRESH_INTERVAL_S` until cancelled."""
        await refresh_every(self.refresh, REFRESH_INTERVAL_S, "finalized features")
