"""`heap_trim.start`: after a burst that freed most of what it allocated, the process's resident size falls back once
it has rested a few check intervals, where a process without the trimming thread keeps holding it. Each side runs in
a fresh interpreter, so this test process's heap and threads are untouched."""

from __future__ import annotations

import subprocess
import sys
import textwrap

MIB = 1024 * 1024

SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from actors import heap_trim

    trimming = sys.argv[1] == "trim"
    if trimming:
        assert heap_trim.start(check_interval_s=0.05, rest_checks=3)
        assert heap_trim.start(), "a second start answers that the thread runs"
        threads = [thread for thread in threading.enumerate() if thread.name == "heap-trim"]
        assert len(threads) == 1, threads
    before = heap_trim.resident_bytes()
    kept = []
    peaks = []

    def burst():
        # 150 MB in chunks glibc serves from its arenas (above pymalloc's 512 bytes); one in a hundred stays alive,
        # so each arena's top is in use and glibc's own trimming at free() gives almost nothing back.
        chunks = [bytes(3000) for _ in range(50_000)]
        kept.extend(chunks[::100])
        peaks.append(heap_trim.resident_bytes())

    worker = threading.Thread(target=burst)
    worker.start()
    worker.join()
    time.sleep(1.0)
    print(before, peaks[0], heap_trim.resident_bytes())
    """
)


def _resident_after_burst(mode: str) -> tuple[int, int, int]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, peak, after = (int(field) for field in done.stdout.split())
    return before, peak, after


def test_a_burst_freed_is_given_back_to_the_system_and_kept_without_the_thread() -> None:
    before, peak, after = _resident_after_burst("trim")
    assert peak - before > 100 * MIB, (before, peak)
    assert after - before < 30 * MIB, (before, peak, after)
    before, peak, after = _resident_after_burst("keep")
    assert after - before > 100 * MIB, "without the thread glibc keeps the freed burst (the oracle of the test)"
