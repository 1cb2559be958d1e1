"""Keeping a listener's copy of the controller's state fresh: the ACLs its authorizer answers from
(`cluster.protocol.security.access`) and the client quotas it enforces (`cluster.protocol.quota_enforcer`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from storage.errors import RaybrokerError

logger = logging.getLogger(__name__)


async def refresh_every(refresh: Callable[[], Awaitable[None]], interval_s: float, what: str) -> None:
    """Runs `refresh` every `interval_s` until cancelled; a refresh that fails keeps the last copy of `what`. The
    first failure of a run of them is a warning, the rest debug lines: a controller away for a while (or none, for
    a listener with no controller to ask) does not fill the log."""
    failing = False
    while True:
        try:
            await refresh()
            failing = False
        except RaybrokerError as exc:
            logger.log(
                logging.DEBUG if failing else logging.WARNING,
                "cannot refresh the %s (keeping the last copy): %s",
                what,
                exc,
            )
            failing = True
        await asyncio.sleep(interval_s)
