"""`freeze_startup_objects`: the objects alive at the first call leave the full collections, once per process, and
cycles made later are still collected. Run in a fresh interpreter, so this test process's collector is untouched."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import gc, time
    from actors.startup_objects import freeze_startup_objects

    startup = [[i] for i in range(200_000)]  # lists are always tracked by the collector
    start = time.perf_counter()
    gc.collect()
    before_ms = (time.perf_counter() - start) * 1000
    freeze_startup_objects()
    frozen = gc.get_freeze_count()
    assert frozen >= 200_000, frozen
    freeze_startup_objects()
    assert gc.get_freeze_count() == frozen, "a second call froze again"

    class Node:
        pass

    later = Node()
    later.me = later
    del later
    assert gc.collect() >= 1, "a cycle made after the freeze was not collected"
    start = time.perf_counter()
    gc.collect()
    after_ms = (time.perf_counter() - start) * 1000
    assert after_ms < before_ms / 5, (before_ms, after_ms)
    print("ok")
    """
)


def test_the_objects_alive_at_the_first_call_leave_full_collections_once() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
