"""Making a partition log durable: fsyncs and the recovery point (Kafka's `LocalLog.flush`, and the flush its
scheduler runs after a roll).

Every offset below the recovery point is known fsynced (its segments, their indexes and the folder's entries):
recovery after a crash re-reads the log from there on. `flush(target)` fsyncs every segment holding offsets in
[recovery point, target) and the folder, then moves the recovery point to `target` (never past the log end).

A roll fsyncs the sealed segments as Kafka does, in the background: the process's flusher thread fsyncs them
outside the log lock, so the append that rolled does not wait for the disk, and then moves the recovery point to
the new segment's base, unless the log was truncated meanwhile. An I/O error there is kept and raised by the log's
next append or flush (`check`); the log's `close` waits for these flushes first.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path

from storage.clock import Clock
from storage.errors import KafkaStorageError, StorageError
from storage.file_io import fsync_dir
from storage.segment.log_segments import LogSegments

_FLUSHER: concurrent.futures.ThreadPoolExecutor | None = None
_FLUSHER_LOCK = threading.Lock()


def _flusher() -> concurrent.futures.ThreadPoolExecutor:
    """The process's flusher thread (Kafka's scheduler runs the flush after a roll on its background threads):
    one for every log of the process, started on first use."""
    global _FLUSHER
    with _FLUSHER_LOCK:
        if _FLUSHER is None:
            _FLUSHER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-flusher")
        return _FLUSHER


class LogFlush:
    """The recovery point of one log and the flushes that move it. Calls other than the background flush's own run
    under the log's writer lock (`lock`), which the background flush takes to read and move the state."""

    def __init__(
        self,
        directory: Path,
        segments: LogSegments,
        clock: Clock,
        lock: threading.RLock,
        recovery_point: int,
        log_end_offset: Callable[[], int],
        closed: Callable[[], bool],
    ) -> None:
        self._directory = directory
        self._segments = segments
        self._clock = clock
        self._lock = lock
        self._log_end_offset = log_end_offset
        self._closed = closed
        self.recovery_point = recovery_point
        self.last_flush_ms = clock.milliseconds()
        self._background: list[concurrent.futures.Future[None]] = []
        # Bumped by every truncation: a background flush started before one does not move the recovery point, and a
        # copy of the log being filled beside it (`storage.partition.future_log`) copies again what was cut.
        self.truncations = 0
        # An I/O error of a background flush, raised by the next append or flush.
        self._error: KafkaStorageError | None = None

    def moved(self, directory: Path, segments: LogSegments) -> LogFlush:
        """This state for the log's folder copied, fsynced, to `directory` as `segments`
        (`storage.partition.future_log`): everything up to the log end is durable there."""
        end = self._log_end_offset()
        flush = LogFlush(directory, segments, self._clock, self._lock, end, self._log_end_offset, self._closed)
        flush.truncations = self.truncations
        return flush

    def check(self) -> None:
        """Raises the I/O error a background flush met, if any."""
        if self._error is not None:
            raise self._error

    def flush(self, target: int) -> None:
        """fsyncs the segments holding offsets in [recovery point, target) (the active one always) and the folder."""
        for segment in self._segments.from_floor(self.recovery_point):
            if segment.base_offset >= target and segment is not self._segments.active:
                break
            segment.flush()
        fsync_dir(self._directory)
        self._mark_flushed(target)

    def _mark_flushed(self, offset: int) -> None:
        """Everything below `offset` (at most the log end) is fsynced: the recovery point moves there."""
        self.recovery_point = max(self.recovery_point, min(offset, self._log_end_offset()))
        self.last_flush_ms = self._clock.milliseconds()

    def on_truncated(self, offset: int) -> None:
        """The log was cut to `offset`: the recovery point is not above it, and running flushes no longer count."""
        self.recovery_point = min(self.recovery_point, offset)
        self.truncations += 1

    def flush_in_background(self, offset: int) -> None:
        """Kafka's flush after a roll, on the flusher thread: the segments below `offset` (the new segment's base)."""
        self._background = [flush for flush in self._background if not flush.done()]
        self._background.append(_flusher().submit(self._flush_rolled, offset, self.truncations))

    def _flush_rolled(self, offset: int, truncations: int) -> None:
        with self._lock:
            if self._closed():
                return
            segments = [s for s in self._segments.from_floor(self.recovery_point) if s.base_offset < offset]
        try:
            for segment in segments:
                segment.flush()
            fsync_dir(self._directory)
        except (StorageError, OSError, ValueError) as exc:
            with self._lock:
                # A segment deleted or a log closed meanwhile has nothing left to make durable.
                if self._closed() or any(self._segments.get(s.base_offset) is not s for s in segments):
                    return
                self._error = (
                    exc
                    if isinstance(exc, KafkaStorageError)
                    else KafkaStorageError(f"flushing rolled segments failed: {exc}", path=self._directory)
                )
            return
        with self._lock:
            if not self._closed() and self.truncations == truncations:
                self._mark_flushed(offset)

    def wait(self) -> None:
        """Returns once the flushes started by rolls so far are done (the recovery point has moved)."""
        for flush in list(self._background):
            flush.result()
