"""What a producer's send hands back: `RecordMetadata` (where a record was written), `RecordFuture` and
`SendManyFuture`.

`Producer.send` answers with a `RecordFuture`, a `concurrent.futures.Future[RecordMetadata]`; `Producer.send_many`
answers with one `SendManyFuture` for all its records, which its batches report to as each is acknowledged or
fails.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from storage.errors import RequestTimedOutError
from storage.records.record_batch import NO_TIMESTAMP

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written: its partition, offset and timestamp (LogAppendTime if the topic uses it)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class RecordFuture(Future[RecordMetadata]):
    """`Producer.send`'s future: a `concurrent.futures.Future` in every respect (`result`, callbacks, `wait`,
    `as_completed`), that starts running (it cannot be cancelled: the record is queued) and shares the lock
    and condition of the other records of its batch, which are answered together.

    Why not `Future()`: its constructor builds a `threading.Condition` (with its lock) per future, and with
    `set_running_or_notify_cancel` that was half of what `send` cost per record (py-spy). `Future` keeps its
    state in the attributes set here, which are the ones its own constructor sets (CPython 3.8 to 3.13); its
    methods only ever use them under `_condition`, so futures may share one."""

    def __init__(self, condition: threading.Condition) -> None:
        # `Future.__init__` is deliberately not called: it would build the per-future condition.
        self._condition = condition
        self._state = "RUNNING"
        self._result = None
        self._exception = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []

    @staticmethod
    def set_results(
        condition: threading.Condition, futures: Sequence[RecordFuture], results: Iterable[RecordMetadata]
    ) -> None:
        """`set_result` of every future of a batch (all sharing `condition`), taking the condition and waking its
        waiters once for the batch instead of once per record; then each future's done callbacks run, as
        `set_result` runs them, outside the condition."""
        with condition:
            for future, result in zip(futures, results, strict=True):
                if future._state != "RUNNING":
                    raise InvalidStateError(f"{future._state}: {future!r}")
                future._result = result
                future._state = "FINISHED"
                for waiter in future._waiters:
                    waiter.add_result(future)
            condition.notify_all()
        for future in futures:
            for callback in future._done_callbacks:
                try:
                    callback(future)
                except Exception:
                    logger.exception("a done callback of %r failed", future)


class SendManyFuture:
    """The outcome of one `send_many` call: every record's `RecordMetadata` through one handle.

    The records travel in several batches, possibly to several partitions; `done()` is true once every batch
    was acknowledged or failed. `result()` gives the metadata in the order the records were given, or raises
    the typed error of the first batch that failed (the other batches may have been written). `wait()` waits
    the same way without building one `RecordMetadata` per record (at 1M records that costs ~0.5 s).

    The methods whose names start with an underscore are the producer's side: the accumulator counts the
    batches in (`_add_batch`, then `_seal`), and each batch reports its outcome (`_acknowledged`, `_failed`).
    """

    def __init__(self, topic: str, timestamps: list[int]) -> None:
        self.topic = topic
        self.count = len(timestamps)
        self._timestamps = timestamps
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._pending = 0
        self._sealed = False
        self._error: BaseException | None = None
        # Per acknowledged batch: record indices, partition, first offset, LogAppendTime (or -1).
        self._acks: list[tuple[Sequence[int], int, int, int]] = []

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> None:
        """Waits until every record is acknowledged; raises the first batch's error, or `RequestTimedOutError`."""
        self._wait_done(timeout)
        if self._error is not None:
            raise self._error

    def _wait_done(self, timeout: float | None) -> None:
        if not self._done.wait(timeout):
            raise RequestTimedOutError(f"send_many of {self.count} records not answered within {timeout} s")

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The first failed batch's error (None if all were written), after waiting as `wait` does."""
        self._wait_done(timeout)
        return self._error

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        """Each record's metadata, in the order the records were given to `send_many`."""
        self.wait(timeout)
        metadata: list[RecordMetadata | None] = [None] * self.count
        timestamps = self._timestamps
        for indices, partition, first_offset, log_append_time in self._acks:
            for position, index in enumerate(indices):
                written = timestamps[index] if log_append_time == NO_TIMESTAMP else log_append_time
                metadata[index] = RecordMetadata(self.topic, partition, first_offset + position, written)
        return [item for item in metadata if item is not None]

    def _add_batch(self) -> None:
        with self._lock:
            self._pending += 1

    def _seal(self) -> None:
        """No more batches will be added (send_many queued them all)."""
        with self._lock:
            self._sealed = True
            self._finish_if_done()

    def _acknowledged(self, indices: Sequence[int], partition: int, first_offset: int, log_append_time: int) -> None:
        with self._lock:
            self._acks.append((indices, partition, first_offset, log_append_time))
            self._pending -= 1
            self._finish_if_done()

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._error = self._error or error
            self._pending -= 1
            self._finish_if_done()

    def _finish_if_done(self) -> None:
        if self._sealed and self._pending == 0:
            self._done.set()


__all__ = ["RecordFuture", "RecordMetadata", "SendManyFuture"]
