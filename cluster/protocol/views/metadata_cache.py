"""A Kafka listener's metadata cache: the controller's answers to its metadata questions, kept while nothing changed.

A Kafka broker answers Metadata from its own metadata cache, which follows the controller's metadata log; it never
asks the controller per request, and a client's Metadata costs it well under a millisecond. `MetadataCache` gives
a raybroker listener the same: it keeps the controller's answers (`BrokerView._metadata`: the topics, a topic's
partitions and their states, the running brokers and listeners) for as long as the controller's count of metadata
changes (`actors.core.controller.metadata_changes`) stays where this cache last saw it. One task keeps a call to
`Controller.await_metadata_change` waiting, which returns once the count moves; every answer kept is then dropped.

Why no answer it keeps is older than what the controller had when the count last moved:
- an answer is kept only if the cache was not emptied while it was being asked (`generation`), so an answer the
  controller gave before a change is never kept after the change was seen;
- the wait returns only once the change's own update is over (it takes the controller's lock), so a question
  asked after the cache was emptied sees the change;
- answers are kept only while a wait is known to be in place: from the first answered wait until one fails or
  does not come back within `WATCH_WAIT_MS` plus `WATCH_GRACE_S` (the controller unreachable, restarted, or its head
  lost), when everything kept is dropped and each question goes to the controller again until a wait succeeds;
- the listener's own changes (a topic created, grown, deleted or reconfigured, an election, a reassignment) empty
  it when they return (`invalidate`), so its next request sees them without waiting for the count.
Between a change by another listener or by the controller itself (an election after a broker's loss) and its
wait's return, a question may still be answered as before the change: a millisecond or two, as a Kafka broker's
cache lags its controller. Errors are never kept, nor the last answer a listener gives in the place of a controller
that does not answer (`BrokerView._metadata`), nor an answer of a call begun before the last emptying.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from cluster.protocol.views.transport import Transport
from storage.errors import RaybrokerError

logger = logging.getLogger(__name__)

# How long one wait for a change lasts at the controller before it answers "no change" and is asked again.
WATCH_WAIT_MS = 10_000
# How much longer than that the listener waits for the wait's answer before it stops trusting what it keeps.
WATCH_GRACE_S = 5.0
# The pause before a failed wait is asked again.
WATCH_RETRY_S = 1.0
# What `get` answers for a question not kept.
MISS = object()


class MetadataCache:
    """See the module docstring. Not thread-safe: one event loop uses it; its watch starts with the first
    `generation` asked on that loop."""

    def __init__(self, controller: Transport) -> None:
        self._controller = controller
        self._answers: dict[tuple[Any, ...], Any] = {}
        self._generation = 0
        self._watching = False
        self._watch: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def watching(self) -> bool:
        """Whether a wait for the controller's changes is in place, so answers are kept."""
        return self._watching

    def get(self, question: tuple[Any, ...]) -> Any:
        """The answer kept for `question`, or `MISS`."""
        return self._answers.get(question, MISS)

    def generation(self) -> int:
        """The count of emptyings, to give `put` with the answer of a question asked now; starts the watch."""
        if self._watch is None and not self._closed:
            self._watch = asyncio.get_running_loop().create_task(self._follow_changes())
        return self._generation

    def put(self, question: tuple[Any, ...], answer: Any, generation: int) -> None:
        """Keeps `answer` if the cache was not emptied since `generation` was asked and a wait is in place."""
        if self._watching and generation == self._generation:
            self._answers[question] = answer

    def invalidate(self) -> None:
        """Drops every answer kept, and any being asked."""
        self._generation += 1
        self._answers.clear()

    async def close(self) -> None:
        """Stops the watch, and returns once it has stopped (before its event loop closes); nothing is kept after."""
        self._closed = True
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            await asyncio.wait({watch})
        self._stop_trusting()

    def _stop_trusting(self) -> None:
        self._watching = False
        self.invalidate()

    async def _follow_changes(self) -> None:
        """Keeps one wait for a change in place until `close`. The wait is bounded with `asyncio.timeout`, not
        `asyncio.wait_for`: Python 3.11's `wait_for`, cancelled in the loop turn its answer arrives, returns the
        answer and drops the cancellation, and a listener's close meets that turn (its own unregistering moves the
        count as it closes); the watch would go on waiting and hold the listener's thread. The loop also ends on
        `_closed`."""
        known: int | None = None
        try:
            while not self._closed:
                try:
                    async with asyncio.timeout(WATCH_WAIT_MS / 1000 + WATCH_GRACE_S):
                        count = await self._controller.call("await_metadata_change", known, WATCH_WAIT_MS)
                except (RaybrokerError, TimeoutError) as exc:
                    logger.debug("metadata cache: waiting for the controller's changes failed (%s)", exc)
                except Exception:
                    logger.exception("metadata cache: waiting for the controller's changes failed")
                else:
                    if count != known:
                        self.invalidate()
                    known = count
                    self._watching = True
                    continue
                self._stop_trusting()
                known = None
                await asyncio.sleep(WATCH_RETRY_S)
        finally:
            self._stop_trusting()


__all__ = ["MISS", "WATCH_GRACE_S", "WATCH_RETRY_S", "WATCH_WAIT_MS", "MetadataCache"]
