"""The moves of a broker's partitions between its log dirs (Kafka's `ReplicaAlterLogDirsManager` with its
`ReplicaAlterLogDirsThread`, and `LogManager.preferredLogDirs`): which partition is being moved into which dir, the
thread that advances them, the dirs asked for partitions the broker does not hold yet, and which configured dir a
request's path names (`named_log_dir`).

The log manager (`storage.logdir.log_manager`) decides (AlterReplicaLogDirs' checks, starting and abandoning a
copy); each partition runs its own copy where its log lives (`storage.logdir.partition_handles.LogMove`). The
`alter-log-dirs` thread, started with the first move, asks every partition being moved for one round of its copy
after the other (`PartitionHandle.advance_move`: at most `future_log.ROUND_BYTES`, then the swap once it has caught
up), and tells the manager of each move that ended (`on_done`), even if a request meanwhile asked for another dir:
the log did move. A move that fails is logged and forgotten: its copy is gone, the log stays where it was. The
thread rests while no move is under way and stops with `stop`.

A dir asked for a partition the broker does not hold (`prefer`) is where that partition is created later, once
(Kafka's `maybeUpdatePreferredLogDir`, what `kafka-reassign-partitions` relies on when its reassignment JSON names
log dirs for replicas it is adding). Nothing here is persisted: a `-future` folder found at startup is the only
trace of a move, and the manager starts that move again.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from storage.errors import LogDirNotFoundError
from storage.logdir.partition_handles import MoveProgress, PartitionHandle
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# How long the thread rests between two passes over the moves: a pass that copied nothing (a copy waiting for a
# segment deleted under it) must not spin.
PASS_PAUSE_S = 0.01
# How long `stop` waits for the round in progress (at most `ROUND_BYTES` copied, or a swap).
STOP_TIMEOUT_S = 60.0


class AlterLogDirs:
    """The moves under way and the preferred dirs of one log manager; see the module docstring."""

    def __init__(
        self,
        handle_of: Callable[[TopicPartition], PartitionHandle | None],
        on_done: Callable[[TopicPartition, MoveProgress], None],
    ) -> None:
        """`handle_of` finds a partition's handle (None once deleted); `on_done` runs on the thread."""
        self._handle_of = handle_of
        self._on_done = on_done
        self._changed = threading.Condition()
        self._targets: dict[TopicPartition, Path] = {}
        self._preferred: dict[TopicPartition, Path] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False

    def target(self, tp: TopicPartition) -> Path | None:
        """The dir `tp` is being moved into, None when it is not being moved."""
        with self._changed:
            return self._targets.get(tp)

    def targets(self) -> dict[TopicPartition, Path]:
        with self._changed:
            return dict(self._targets)

    def start(self, tp: TopicPartition, target: Path) -> None:
        """`tp`'s copy into `target` was started: the thread advances it from now on."""
        with self._changed:
            if self._stopping:
                return
            self._targets[tp] = target
            self._preferred.pop(tp, None)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="alter-log-dirs", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def cancel(self, tp: TopicPartition) -> Path | None:
        """Forgets `tp`'s move (the caller drops its copy); the dir it was moving into, None without a move."""
        with self._changed:
            target = self._targets.pop(tp, None)
            self._changed.notify_all()
            return target

    def prefer(self, tp: TopicPartition, log_dir: Path) -> None:
        """`tp`, not held by the broker, is to be created in `log_dir`."""
        with self._changed:
            self._preferred[tp] = log_dir

    def take_preferred(self, tp: TopicPartition) -> Path | None:
        """The dir asked for `tp` before it was created here, forgotten once taken."""
        with self._changed:
            return self._preferred.pop(tp, None)

    def wait_until_done(self, timeout_s: float) -> bool:
        """Waits until no move is under way; False if one still is after `timeout_s`."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._targets, timeout_s)

    def stop(self) -> None:
        """Stops the thread after its round in progress; the moves under way are forgotten (their copies stay on
        disk, for the next startup to find). A later `start` starts the thread again."""
        with self._changed:
            self._stopping = True
            self._targets.clear()
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=STOP_TIMEOUT_S)
        with self._changed:
            self._stopping = False
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._stopping or bool(self._targets))
                if self._stopping:
                    return
                moves = list(self._targets.items())
            for tp, target in moves:
                self._advance(tp, target)
            with self._changed:
                self._changed.wait(PASS_PAUSE_S)

    def _advance(self, tp: TopicPartition, target: Path) -> None:
        """One round of `tp`'s move into `target`."""
        if self.target(tp) != target:
            return
        handle = self._handle_of(tp)
        if handle is None:
            self.cancel(tp)
            return
        try:
            progress = handle.advance_move().result()
        except Exception as exc:
            with self._changed:
                current = self._targets.get(tp) == target
                if current:
                    del self._targets[tp]
                    self._changed.notify_all()
            if current:
                logger.warning("moving %s-%d into %s failed: %s", tp[0], tp[1], target, exc)
            return
        if not progress.done:
            return
        self._on_done(tp, progress)
        with self._changed:
            if self._targets.get(tp) == target:
                del self._targets[tp]
            self._changed.notify_all()


def named_log_dir(target: str, log_dirs: Sequence[Path]) -> Path:
    """The dir of `log_dirs` (resolved) that the absolute path `target` names (Kafka compares absolute paths);
    `LogDirNotFoundError` for any other path, one the file system refuses to resolve (a NUL byte, too long)
    included."""
    try:
        if isinstance(target, str) and os.path.isabs(target):
            for named in (Path(target), Path(target).resolve()):
                if named in log_dirs:
                    return named
    except (OSError, ValueError):
        pass
    raise LogDirNotFoundError(f"log dir {str(target)[:300]!r} is not found in the config")
