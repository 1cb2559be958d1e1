"""The `.lock` file of a log dir: one owner at a time (Kafka's `FileLock` as used by `LogManager.lockLogDirs`).

`<dir>/.lock` is an empty file, created if missing and never deleted (deleting it would let a later locker take
a lock on a new inode while an older holder still locks the unlinked one). Ownership is an exclusive,
non-blocking `flock(2)` held for the lifetime of the owner and released on `release()` or process exit, so a
crashed owner never leaves a stale lock behind.

flock locks belong to an open file description, so a second `LogDirLock` on the same dir fails whether it is
in another process or in this one (POSIX `fcntl` record locks would let the same process lock twice). The
descriptor is close-on-exec, so child processes do not inherit the lock. Note: the JVM's `FileChannel.tryLock`
takes an `fcntl` lock, which Linux keeps apart from flock, so this lock excludes other raybroker processes,
not a Java Kafka broker on the same dir.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from storage.errors import KafkaStorageError, LogDirLockedError
from storage.file_names import LOCK_FILE


class LogDirLock:
    """Holds `<log_dir>/.lock` exclusively from construction until `release()` (or the end of a `with` block).

    Raises `LogDirLockedError` when another owner holds it and `KafkaStorageError` when the file cannot be opened.
    """

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = Path(log_dir)
        self._path = self._log_dir / LOCK_FILE
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise KafkaStorageError(f"failed to open lock file: {exc.strerror or exc}", path=self._path) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise LogDirLockedError(
                f"Failed to acquire lock on file {LOCK_FILE} in {self._log_dir}. "
                "A Kafka instance in another process or thread is using this directory.",
                path=self._path,
            ) from exc
        except OSError as exc:
            os.close(fd)
            raise KafkaStorageError(f"failed to lock: {exc.strerror or exc}", path=self._path) from exc
        self._fd: int | None = fd

    @property
    def log_dir(self) -> Path:
        return self._log_dir

    @property
    def path(self) -> Path:
        return self._path

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Unlock and close; a second call does nothing."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as exc:
            raise KafkaStorageError(f"failed to unlock: {exc.strerror or exc}", path=self._path) from exc
        finally:
            os.close(fd)

    def __enter__(self) -> LogDirLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"LogDirLock({str(self._log_dir)!r}, locked={self.locked})"
