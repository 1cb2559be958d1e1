"""Gives back to the operating system the heap a broker process freed after a burst of work (glibc's `malloc_trim`).

glibc keeps the memory a process frees in its malloc arenas for reuse and returns only the free space at the top of
each arena; freed chunks below a live one stay resident (USS) for good. A broker's bursts leave much of it: creating
a topic of 2,000 partitions left the controller actor at 153 MiB, 88 MiB after `malloc_trim(0)`; the log manager
122 -> 79 MiB; the listener's process 252 -> 223 MiB (`partitions_scaling`, one node). `malloc_trim(0)` hands every
whole free page back (`madvise(MADV_DONTNEED)`), which costs ~5-15 ms on a heap of ~150 MiB, holding each arena's lock
while it walks it.

`start()` starts, once per process, a daemon thread that reads the process's resident size every `CHECK_INTERVAL_S`
and trims when the size has stayed within `MOVED_BYTES` for `REST_CHECKS` looks in a row and is `MOVED_BYTES` above
what it was after the last trim: a burst's garbage is all freed once its work ends, and trimming in its middle would
hand back pages the burst takes again (and keep what it frees later). A process at rest is not trimmed again until it
grows; a busy one at most once per `REST_CHECKS` looks. Only a glibc Linux process has both `malloc_trim` and
`/proc/self/statm`; elsewhere `start()` does nothing and says so by returning False.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

CHECK_INTERVAL_S = 1.0
REST_CHECKS = 3
# Between two looks an idle broker process still allocates a little (heartbeats, metrics); less than this is rest.
MOVED_BYTES = 1024 * 1024
_STATM = Path("/proc/self/statm")

_lock = threading.Lock()
_started = False


def start(check_interval_s: float = CHECK_INTERVAL_S, rest_checks: int = REST_CHECKS) -> bool:
    """Starts this process's trimming thread unless it runs already; whether it runs."""
    global _started
    with _lock:
        if _started:
            return True
        trim = _malloc_trim()
        if trim is None or resident_bytes() is None:
            return False
        _started = True
        threading.Thread(
            target=_trim_at_rest, args=(trim, check_interval_s, rest_checks), name="heap-trim", daemon=True
        ).start()
    return True


def resident_bytes() -> int | None:
    """This process's resident set size, None where `/proc/self/statm` is missing."""
    try:
        fields = _STATM.read_text().split()
    except OSError:
        return None
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim_at_rest(trim: Callable[[int], int], check_interval_s: float, rest_checks: int) -> None:
    previous = resident_bytes() or 0
    after_trim = previous
    calm = 0
    while True:
        time.sleep(check_interval_s)
        resident = resident_bytes() or 0
        calm = calm + 1 if abs(resident - previous) < MOVED_BYTES else 0
        if calm >= rest_checks and resident - after_trim >= MOVED_BYTES:
            trim(0)
            resident = after_trim = resident_bytes() or 0
        previous = resident


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `int malloc_trim(size_t pad)` among the symbols the process has loaded (no `find_library`, which runs
    `ldconfig` in a subprocess), None on a C library without it (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    function: Callable[[int], int] = trim
    return function
