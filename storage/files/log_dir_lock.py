"""The `.lock` file of a log dir: one owner at a time (Kafka's `FileLock` as used by `LogManager.lockLogDirs`).

`<dir>/.lock` is an empty file, created if missing and never deleted (deleting it would let a later locker take
a lock on a new inode while an older holder still locks the unlinked one). Ownership is an exclusive,
non-blocking write lock on the whole file held for the lifetime of the owner and released on `release()` or
process exit, so a crashed owner never leaves a stale lock behind.

The lock is a Linux open file description lock (`fcntl(F_OFD_SETLK)`), chosen for two properties at once:
- it conflicts with POSIX record locks (`F_SETLK`), which is what a Java Kafka broker takes on the same file
  (`FileChannel.tryLock()` locks bytes 0..Long.MAX_VALUE with `fcntl`), so raybroker and Kafka exclude each
  other in both directions;
- like `flock(2)`, it belongs to the open file description, not to the process, so a second `LogDirLock` on the
  same dir fails in this process too, and a failed attempt closing its own descriptor does not drop the holder's
  lock (closing any descriptor of a file drops every POSIX record lock the process holds on it).
`flock` is not taken as well: it would only exclude raybroker builds from before this lock, and every property
it gave is covered above. The descriptor is close-on-exec, so child processes do not inherit the lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from pathlib import Path
from types import TracebackType

from storage.errors import KafkaStorageError, LogDirLockedError
from storage.file_names import LOCK_FILE

# Linux `struct flock`, native layout; the trailing `0q` pads it to its 8-byte alignment (32 bytes on 64-bit
# Linux), the size the kernel reads.
_FLOCK = struct.Struct(
    "h"  # l_type: F_WRLCK to lock, F_UNLCK to unlock
    "h"  # l_whence: SEEK_SET
    "q"  # l_start: 0
    "q"  # l_len: 0 = to the end of the file and beyond, the whole file
    "i"  # l_pid: must be 0 for an open file description lock
    "0q"
)
# What F_OFD_SETLK reports when a conflicting lock is held (fcntl(2) allows either).
_LOCK_HELD_ERRNOS = frozenset({errno.EAGAIN, errno.EACCES})


def _whole_file(lock_type: int) -> bytes:
    return _FLOCK.pack(lock_type, os.SEEK_SET, 0, 0, 0)


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
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _whole_file(fcntl.F_WRLCK))
        except OSError as exc:
            os.close(fd)
            if exc.errno in _LOCK_HELD_ERRNOS:
                raise LogDirLockedError(
                    f"Failed to acquire lock on file {LOCK_FILE} in {self._log_dir}. "
                    "A Kafka instance in another process or thread is using this directory.",
                    path=self._path,
                ) from exc
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
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _whole_file(fcntl.F_UNLCK))
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
