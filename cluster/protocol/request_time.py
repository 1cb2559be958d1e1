"""The time a request's handling keeps the event loop busy: what Kafka's request quota (`request_percentage`)
measures as a request's thread time.

A handler is a coroutine that runs in steps between its awaits (of actors, of other listeners, of a long poll);
`TimedCoroutine` runs it and adds up the wall time of its steps, not of the waits between them, as Kafka counts the
time a request spends on its network and I/O threads and not the time it waits in purgatory. On the listener's one
event loop a step's wall time is the loop's time given to that request.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Generator
from typing import Any, Generic, TypeVar

_Result = TypeVar("_Result")


class TimedCoroutine(Generic[_Result]):
    """Awaits `awaitable` (a handler's coroutine), adding the time of each of its steps to `elapsed_ns`."""

    def __init__(self, awaitable: Awaitable[_Result]) -> None:
        self._awaitable = awaitable
        self.elapsed_ns = 0

    def __await__(self) -> Generator[Any, Any, _Result]:
        steps = self._awaitable.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                yielded = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                self.elapsed_ns += time.perf_counter_ns() - started
                result: _Result = done.value
                return result
            except BaseException:
                self.elapsed_ns += time.perf_counter_ns() - started
                raise
            self.elapsed_ns += time.perf_counter_ns() - started
            try:
                value, error = (yield yielded), None
            except BaseException as exc:
                value, error = None, exc
