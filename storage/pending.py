"""A result that may not be there yet: what a partition handle answers (`storage.logdir.partition_handles`).

A log manager asks all its partitions at once, then collects the answers, so partitions that live in other
processes (Ray actors) work in parallel: each call returns a `Pending`, and `result()` waits for it and
raises the partition's own error. `concurrent.futures.Future` is one; `completed` makes one for work done
in this process, at the call; `collect` waits for several.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Protocol, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Pending(Protocol[T_co]):
    """An answer to collect: `result` waits for it (at most `timeout` seconds) and raises the call's error."""

    def result(self, timeout: float | None = None) -> T_co: ...


def completed(work: Callable[[], T]) -> Future[T]:
    """Runs `work` now; its value, or the exception it raised, is the returned future's result."""
    future: Future[T] = Future()
    try:
        future.set_result(work())
    except Exception as exc:
        future.set_exception(exc)
    return future


def collect(pending: Sequence[Pending[T]]) -> list[T]:
    """Every answer, in order, once all have ended; raises the first failure after that."""
    answers: list[T] = []
    failure: BaseException | None = None
    for one in pending:
        try:
            answers.append(one.result())
        except BaseException as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return answers
