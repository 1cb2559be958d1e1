"""Bytes of a fetch answer left in their segment file, for the listener to `sendfile` from the page cache.

A Fetch of a partition on the listener's own node does not read the records: the partition's view locates them
(`storage.partition.local_log_view`; the partition actor, `storage.partition.file_slices`, when the view cannot),
the listener opens the located file (checking it is still the same inode holding those bytes) and puts a
`FileRegion` in the response where the records go. kio encodes the response around it, asking the region only for
its length (`__len__`), and `framing.encode_response` cuts the frame there, so the server writes the bytes before,
then `sendfile`s the region straight from the page cache to the socket (Kafka's zero copy), then the bytes after.
The opened file stays readable if the segment is deleted meanwhile, and segments are append-only below their size,
so the bytes sent are the bytes located.

A region owns its open file: the server closes it once sent; a region that is never sent (its request was
abandoned, or the response limit left its records out) is closed when it is dropped.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from storage.partition.file_slices import FileSlice, open_located

# Located bytes from this size on are sent from the page cache with `sendfile`; smaller ones are read into the
# response (one `pread` costs less than the socket flush and the system call a region needs).
SENDFILE_MIN_BYTES = 16 * 1024


@dataclass(eq=False, slots=True)
class FileRegion:
    """`length` bytes at `position` of the open `file`."""

    file: io.FileIO
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def close(self) -> None:
        self.file.close()


def open_region(file_slice: FileSlice) -> FileRegion | None:
    """The slice's bytes as a region of its file, if the file is still the located one and holds them; None
    otherwise (the caller then reads through the partition's actor)."""
    fd = open_located(file_slice)
    if fd is None:
        return None
    return FileRegion(io.FileIO(fd, "rb", closefd=True), file_slice.position, file_slice.length)
