"""The `.kafka_cleanshutdown` marker (Kafka's `CleanShutdownFileHandler`).

Its presence is what counts: a dir (a log dir, or a partition folder for a standalone `Log`) holding the
marker was closed cleanly, so loading trusts its indexes and skips recovery. Brokers since Kafka 3.7 also store
the broker epoch (KIP-966) as compact JSON, exactly::

    {"version":0,"brokerEpoch":53326}       UTF-8, no spaces, no newline; -1 when no epoch is known

Older brokers wrote an empty file, and one Kafka release wrote the numbers as strings under `broker_epoch`;
`read_clean_shutdown` accepts all three and returns None for an epoch it cannot find, never a JSON error.

Lifecycle: the loader calls `delete_clean_shutdown_marker` BEFORE loading, and the deletion is made durable
with a directory fsync, so a crash during loading is an unclean shutdown at the next start; the marker is
written again only at the end of a clean close. Written through `<name>.tmp` + fsync + atomic rename +
directory fsync, so a crash while writing leaves no marker or a whole one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from storage.arguments import is_int
from storage.errors import CorruptCheckpointError, KafkaStorageError
from storage.file_io import fsync_dir, read_if_exists, write_atomically
from storage.file_names import CLEAN_SHUTDOWN_FILE
from storage.files.checkpoint_file import INT64_MAX, INT64_MIN

CLEAN_SHUTDOWN_VERSION = 0
NO_BROKER_EPOCH = -1
# Long.parseLong's grammar, for the string-valued variant.
_DECIMAL = re.compile(r"^[+-]?[0-9]+$")


def clean_shutdown_path(directory: Path) -> Path:
    """`<directory>/.kafka_cleanshutdown`."""
    return Path(directory) / CLEAN_SHUTDOWN_FILE


def has_clean_shutdown_marker(directory: Path) -> bool:
    """Whether `directory` holds the marker, i.e. was closed cleanly."""
    path = clean_shutdown_path(directory)
    try:
        return path.exists()
    except OSError as exc:
        raise KafkaStorageError(f"failed to check clean-shutdown marker: {exc.strerror or exc}", path=path) from exc


def _is_int64(value: object) -> bool:
    return is_int(value) and INT64_MIN <= value <= INT64_MAX


def _epoch(value: object) -> int | None:
    if isinstance(value, str) and _DECIMAL.match(value):
        value = int(value)
    if isinstance(value, int) and _is_int64(value):
        return value
    return None


def parse_clean_shutdown(data: bytes) -> int | None:
    """The broker epoch stored in a marker's bytes, or None (empty, malformed, or no epoch field)."""
    try:
        content = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(content, dict):
        return None
    return _epoch(content.get("brokerEpoch", content.get("broker_epoch")))


def read_clean_shutdown(directory: Path) -> int | None:
    """The broker epoch in `directory`'s marker; None when the marker is absent or holds no readable epoch.

    Use `has_clean_shutdown_marker` to tell "clean" from "unclean": an empty marker is clean with no epoch.
    """
    data = read_if_exists(clean_shutdown_path(directory), "clean-shutdown marker")
    return None if data is None else parse_clean_shutdown(data)


def format_clean_shutdown(broker_epoch: int = NO_BROKER_EPOCH) -> bytes:
    """The marker's bytes: `{"version":0,"brokerEpoch":N}`."""
    if not _is_int64(broker_epoch):
        raise CorruptCheckpointError(f"refusing to write broker epoch {broker_epoch!r}: not an int64")
    return f'{{"version":{CLEAN_SHUTDOWN_VERSION},"brokerEpoch":{broker_epoch}}}'.encode("ascii")


def write_clean_shutdown_marker(directory: Path, broker_epoch: int = NO_BROKER_EPOCH) -> None:
    """Durably mark `directory` as cleanly closed, storing `broker_epoch` (-1 when unknown)."""
    path = clean_shutdown_path(directory)
    try:
        data = format_clean_shutdown(broker_epoch)
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(exc.message, path=path) from exc
    write_atomically(path, data)


def delete_clean_shutdown_marker(directory: Path) -> bool:
    """Remove the marker durably; returns whether it existed (i.e. whether the last shutdown was clean)."""
    path = clean_shutdown_path(directory)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise KafkaStorageError(f"failed to delete clean-shutdown marker: {exc.strerror or exc}", path=path) from exc
    fsync_dir(path.parent)
    return True
