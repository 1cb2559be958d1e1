"""`Closeable`: a resource that `close` releases and a `with` block closes when it ends, shared by every layer.

Java's `AutoCloseable`, and `io.IOBase`'s context manager: entering the block answers the resource itself, leaving it
(normally or by an exception, which goes on) calls `close`. A partition `Log`, the `Consumer` and `Producer` facades and
the protocol's `WireClient` are used this way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class Closeable(ABC):
    """A resource whose `with` block ends with `close` (see the module docstring)."""

    @abstractmethod
    def close(self) -> None:
        """Releases what the resource holds."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["Closeable"]
