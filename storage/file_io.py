"""Durable file-system steps shared by every storage file that is replaced whole or renamed.

- `fsync_dir(directory)`: fsync a directory, so the entries it lists (a create, a rename, an unlink) survive a
  crash; rename(2) alone only changes the page cache of the directory.
- `read_if_exists(path, what)`: the bytes of a small file that may be absent (a checkpoint, a marker,
  `partition.metadata`), None when there is none.
- `write_atomically(path, data)`: the whole new content goes to `<name>.tmp` (name from `storage.file_names`),
  which is written, flushed and fsynced, renamed over `path` with `os.replace` (an atomic rename(2)), then the
  parent directory is fsynced so the rename itself is durable.

Crash behaviour: after `write_atomically` a crash leaves either the old or the new `path`, never a mix; a stale
`<name>.tmp` is never read and is overwritten by the next write. On failure the target keeps its old content
and the temporary file is removed. The functions raise only `KafkaStorageError` (with the path), wrapping the
`OSError`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from storage.errors import KafkaStorageError
from storage.file_names import tmp_file


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (a rename, a create, an unlink) durable."""
    try:
        _sync_directory(directory)
    except OSError as exc:
        raise KafkaStorageError(f"cannot fsync directory: {exc.strerror or exc}", path=directory) from exc


def read_if_exists(path: Path, what: str) -> bytes | None:
    """`path`'s bytes, or None when there is no such file; `KafkaStorageError` ("failed to read <what>") when it
    exists but cannot be read (an absent file is a state, such as no clean shutdown; an unreadable one a failing
    disk)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KafkaStorageError(f"failed to read {what}: {exc.strerror or exc}", path=path) from exc


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` through `<name>.tmp`: write, fsync, rename, fsync the directory."""
    tmp = tmp_file(path)
    try:
        with open(tmp, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
        _sync_directory(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise KafkaStorageError(f"failed to write {path.name}: {exc.strerror or exc}", path=path) from exc


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
