"""Lookups an event loop asks for in one pass, made as one bulk lookup on a worker thread.

A Produce or Fetch request naming a thousand partitions a listener has not met yet starts a thousand lookups of
their leaders at once (the handlers gather the partitions' answers). One by one, each is several Ray calls on a
worker thread (the controller, the leader node's log manager, the replica), seconds of a request's time at a
thousand partitions. `LookupBatches.get(key)` instead waits for the batch its key joined: the keys asked for
before the loop's next pass are handed to the bulk `look_up` together, and each waiter gets its key's answer or
its error. A key asked for again while its batch runs waits for that batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LookupBatches(Generic[K, V]):
    """Coalesces `get`s into calls of `look_up(keys)` (blocking; run on a worker thread), which answers each key's
    value or its exception; used from one event loop."""

    def __init__(self, look_up: Callable[[list[K]], Mapping[K, V | BaseException]]) -> None:
        self._look_up = look_up
        self._gathering: dict[K, asyncio.Future[V]] = {}
        self._running: dict[K, asyncio.Future[V]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self, key: K) -> V:
        """`key`'s answer from the bulk lookup it joins; raises its error (or the lookup's own)."""
        future = self._gathering.get(key) or self._running.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            if not self._gathering:
                loop.call_soon(self._start, loop)
            future = loop.create_future()
            self._gathering[key] = future
        # Shielded: a waiter cancelled (a fetch's long poll abandoned) leaves the answer to the others.
        return await asyncio.shield(future)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._gathering = self._gathering, {}
        self._running.update(batch)
        task = loop.create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: dict[K, asyncio.Future[V]]) -> None:
        try:
            found: Mapping[K, V | BaseException] = await asyncio.to_thread(self._look_up, list(batch))
        except Exception as exc:
            found = dict.fromkeys(batch, exc)
        finally:
            for key, future in batch.items():
                if self._running.get(key) is future:
                    del self._running[key]
        for key, future in batch.items():
            if future.done():
                continue
            answer = found[key]
            if isinstance(answer, BaseException):
                future.set_exception(answer)
                # Retrieved here: a key whose waiters were all cancelled must not log "never retrieved".
                future.exception()
            else:
                future.set_result(answer)
