"""Reads an event loop asks of one partition host in one pass, sent as one `PartitionHostActor.read_many` call.

A consumer's first contact with a topic resets each partition's offset with a ListOffsets of its own: at 10,000
partitions, 10,000 actor calls from the listener, and submitting an actor call costs its event loop about half a
millisecond. `HostReads.read` instead joins the calls the loop asks for before its next pass, one list per host: each
waiter gets its own partition's answer or error, the errors a call of its own would have raised. Only reads that
answer at once belong here: the host runs a list's calls one after the other on one read thread, so a call that
waited (a long-polling fetch) would hold every call after it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors.calls import answer
from actors.server.partition_host import Outcome, ReadCall
from actors.server.partition_lookup import HostedPartitionHandle


class HostReads:
    """Coalesces `read`s of hosted partitions into one `read_many` call per host per pass; used from one event
    loop."""

    def __init__(self) -> None:
        self._gathering: dict[Any, list[tuple[ReadCall, asyncio.Future[Any]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def read(self, handle: HostedPartitionHandle, method: str, *args: Any, **kwargs: Any) -> Any:
        """`handle.<method>.remote(*args, **kwargs)`'s answer (a read-group method that does not wait), sent with the
        other reads of its host asked for in this pass; raises the partition's own error, or the host's."""
        loop = asyncio.get_running_loop()
        if not self._gathering:
            loop.call_soon(self._send, loop)
        future: asyncio.Future[Any] = loop.create_future()
        call = ReadCall(handle.topic, handle.partition, method, args, kwargs)
        self._gathering.setdefault(handle.host, []).append((call, future))
        return await future

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        gathered, self._gathering = self._gathering, {}
        for host, calls in gathered.items():
            task = loop.create_task(self._answer(host.read_many.remote([call for call, _ in calls]), calls))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _answer(ref: Any, calls: list[tuple[ReadCall, asyncio.Future[Any]]]) -> None:
        try:
            outcomes: list[Outcome] = await answer(ref)
        except Exception as exc:
            outcomes = [Outcome(error=exc)] * len(calls)
        for (_, future), outcome in zip(calls, outcomes, strict=True):
            if future.done():
                continue
            if outcome.error is None:
                future.set_result(outcome.value)
            else:
                future.set_exception(outcome.error)
