"""Checks of caller-supplied arguments shared by every layer.

Python's `bool` is a subclass of `int`, so `isinstance(True, int)` holds: an offset, a partition or a size of
`True` would pass a plain `isinstance` check and be used as 1. Kafka's own API has no such confusion (a Java
`long` is never a `boolean`), so every integer argument is checked with `is_int`.
"""

from __future__ import annotations

from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    """True for an `int` that is not a `bool`."""
    return isinstance(value, int) and not isinstance(value, bool)
