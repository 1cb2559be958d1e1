"""What a producer's send hands back: `RecordMetadata` (where a record was written), `RecordFuture` and
`SendManyFuture`.

`Producer.send` answers with a `RecordFuture`, a `concurrent.futures.Future[RecordMetadata]`; `Producer.send_many`
answers with one `SendManyFuture` for all its records, which its batches report to as each is acknowledged or
fails.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
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


class BatchOutcome:
    """What the `RecordFuture`s of one batch share: one lock and condition, and the batch's outcome, from which
    each future's `RecordMetadata` is made only when it is asked for.

    A batch is answered as a whole (`succeed` or `fail`): one state change, one wake-up, and only the futures
    someone waits on or gave a callback to (`watched`) are visited. Answering each future of a 125-record batch one
    by one, a `RecordMetadata` each, was a fifth of the producer's CPU in `Producer.send` loops (py-spy), all of it
    spent on the sender thread that shares the GIL with the sending one. Nothing else holds the futures: a future
    its caller drops is freed at once, where futures kept until their batch was answered were each walked by the
    garbage collector's full collections (~1.4 us a record of `send`, measured with the collector off)."""

    __slots__ = (
        "condition",
        "exception",
        "first_offset",
        "log_append_time",
        "partition",
        "state",
        "timestamps",
        "topic",
        "watched",
    )

    def __init__(self, topic: str, partition: int, timestamps: Sequence[int]) -> None:
        self.condition = threading.Condition()
        self.topic = topic
        self.partition = partition
        self.timestamps = timestamps
        self.state = "RUNNING"
        self.first_offset = -1
        self.log_append_time = NO_TIMESTAMP
        self.exception: BaseException | None = None
        self.watched: list[RecordFuture] = []

    def metadata(self, index: int) -> RecordMetadata:
        """The metadata of the batch's record `index`, once the batch succeeded."""
        timestamp = self.timestamps[index] if self.log_append_time == NO_TIMESTAMP else self.log_append_time
        return RecordMetadata(self.topic, self.partition, self.first_offset + index, timestamp)

    def succeed(self, first_offset: int, log_append_time: int) -> None:
        """Finishes every future of the batch at once: the partition wrote it from `first_offset`."""
        self._finish(first_offset, log_append_time, None)

    def fail(self, error: BaseException) -> None:
        """Finishes every future of the batch at once with `error`."""
        self._finish(-1, NO_TIMESTAMP, error)

    def _finish(self, first_offset: int, log_append_time: int, error: BaseException | None) -> None:
        """Sets the outcome, wakes the watched futures' waiters, then runs their done callbacks, as
        `Future.set_result` runs them, outside the condition. A future finished on its own before (`set_result`,
        `set_exception`) keeps its own outcome."""
        with self.condition:
            if self.state != "RUNNING":
                raise InvalidStateError(f"{self.state}: the batch of {self.topic}-{self.partition} was answered")
            self.first_offset = first_offset
            self.log_append_time = log_append_time
            self.exception = error
            self.state = "FINISHED"
            watched = [future for future in self.watched if future._own_state is None]
            for future in watched:
                for waiter in future._waiters:
                    if error is None:
                        waiter.add_result(future)
                    else:
                        waiter.add_exception(future)
            self.condition.notify_all()
        for future in watched:
            for callback in future._done_callbacks:
                try:
                    callback(future)
                except Exception:
                    logger.exception("a done callback of %r failed", future)


class RecordFuture(Future[RecordMetadata]):
    """`Producer.send`'s future: a `concurrent.futures.Future` in every respect (`result`, callbacks, `wait`,
    `as_completed`), that starts running (it cannot be cancelled: the record is queued) and whose state, result,
    lock and condition are its batch's (`BatchOutcome`) unless it is changed on its own (`set_result`,
    `set_exception`).

    Why not `Future()`: its constructor builds a `threading.Condition` (with its lock) per future, and with
    `set_running_or_notify_cancel` that was half of what `send` cost per record (py-spy). `Future`'s methods keep
    their state in the attributes `_condition`, `_state`, `_result`, `_exception`, `_waiters` and
    `_done_callbacks` (CPython 3.8 to 3.13) and only ever use them under `_condition`; here the last five are
    properties over the batch's outcome, the lists made (and the future watched) only when first used."""

    def __init__(self, outcome: BatchOutcome, index: int) -> None:
        # `Future.__init__` is deliberately not called: it would build the per-future condition.
        self._condition = outcome.condition
        self._outcome = outcome
        self._index = index
        self._own: dict[str, Any] | None = None

    def _get(self, name: str, default: Any) -> Any:
        return default if self._own is None else self._own.get(name, default)

    def _set(self, name: str, value: Any) -> None:
        if self._own is None:
            self._own = {}
        self._own[name] = value

    @property
    def _own_state(self) -> str | None:
        """The state set on this future alone (`set_result`, `set_exception`), None while its batch's holds."""
        return None if self._own is None else self._own.get("state")

    @property
    def _state(self) -> str:
        state: str = self._get("state", self._outcome.state)
        return state

    @_state.setter
    def _state(self, value: str) -> None:
        self._set("state", value)

    @property
    def _result(self) -> RecordMetadata | None:
        if self._own is not None and ("result" in self._own or "state" in self._own):
            result: RecordMetadata | None = self._own.get("result")
            return result
        outcome = self._outcome
        return outcome.metadata(self._index) if outcome.state == "FINISHED" and outcome.exception is None else None

    @_result.setter
    def _result(self, value: RecordMetadata | None) -> None:
        self._set("result", value)

    @property
    def _exception(self) -> BaseException | None:
        if self._own is not None and ("exception" in self._own or "state" in self._own):
            exception: BaseException | None = self._own.get("exception")
            return exception
        return self._outcome.exception

    @_exception.setter
    def _exception(self, value: BaseException | None) -> None:
        self._set("exception", value)

    @property
    def _waiters(self) -> list[Any]:
        return self._watched_list("waiters")

    @_waiters.setter
    def _waiters(self, value: list[Any]) -> None:
        self._watched_list("waiters")[:] = value

    @property
    def _done_callbacks(self) -> list[Any]:
        return self._watched_list("done_callbacks")

    @_done_callbacks.setter
    def _done_callbacks(self, value: list[Any]) -> None:
        self._watched_list("done_callbacks")[:] = value

    def _watched_list(self, name: str) -> list[Any]:
        """The future's own list `name`, made on first use; a future with one is watched by its batch."""
        found: list[Any] | None = self._get(name, None)
        if found is None:
            found = []
            if self._own is None or ("waiters" not in self._own and "done_callbacks" not in self._own):
                self._outcome.watched.append(self)
            self._set(name, found)
        return found


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
