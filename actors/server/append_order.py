"""Turns that keep a partition's appends in the order they were asked for, whatever each one awaits first.

Kafka reads one request per connection at a time (the channel is muted until the response is sent), so a
producer's pipelined batches reach a partition's log in the order it sent them. A listener here handles a
connection's Produce requests concurrently, and an append may have to await something before it can be submitted: a
transactional batch the transaction coordinator's KIP-890 verification, any batch its leader's lookup. Submitted
in the order those awaits end, a later batch could overtake an earlier one, and an idempotent producer's sequence
numbers would then be refused (OUT_OF_ORDER_SEQUENCE_NUMBER) for a gap that is only a reordering.

`AppendOrder.turn(key)` is taken when the append is asked for, before anything is awaited: it registers the
append behind the last one of its key. `async with` the turn waits until every earlier turn of the key has
submitted (or given up), and leaving it lets the next one go: the append submits inside the block. What an append
awaits before submitting (`admitted`) runs concurrently with the others' waits; only the submissions are in order.
Used from one event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from types import TracebackType


class AppendTurn:
    """One append's place in its key's order (see the module docstring)."""

    __slots__ = ("_done", "_key", "_order", "_previous")

    def __init__(
        self, order: AppendOrder, key: Hashable, previous: asyncio.Future[None] | None, done: asyncio.Future[None]
    ) -> None:
        self._order = order
        self._key = key
        self._previous = previous
        self._done = done

    async def __aenter__(self) -> AppendTurn:
        previous = self._previous
        if previous is not None:
            try:
                await asyncio.shield(previous)
            except BaseException:
                # Cancelled while waiting: the next turn still waits for the earlier ones, then goes.
                previous.add_done_callback(lambda _: self._pass_on())
                raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._pass_on()

    def _pass_on(self) -> None:
        if not self._done.done():
            self._done.set_result(None)
        self._order.finished(self._key, self._done)


class AppendOrder:
    """The turns of the appends of one client (a listener's route or view), per key (see the module docstring)."""

    def __init__(self) -> None:
        # The last turn of each key not yet passed on: the next turn of the key waits for it.
        self._last: dict[Hashable, asyncio.Future[None]] = {}

    def turn(self, key: Hashable) -> AppendTurn:
        """A new turn behind every earlier one of `key`; take it before the append awaits anything."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        turn = AppendTurn(self, key, self._last.get(key), done)
        self._last[key] = done
        return turn

    def finished(self, key: Hashable, done: asyncio.Future[None]) -> None:
        """Forgets `key`'s last turn once it is `done` and no later one was taken."""
        if self._last.get(key) is done:
            del self._last[key]
