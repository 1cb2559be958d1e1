"""`widen_young_generation`: objects a request holds for a while, fewer than the threshold, die young instead of
bringing on full collections. Run in a fresh interpreter, so this test process's collector is untouched."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import gc
    from actors.young_collections import YOUNG_THRESHOLD, widen_young_generation

    def full_collections_while_serving() -> int:
        # Requests of 3,000 objects each, all in flight at once and dropped together: the collector counts
        # allocations net of frees, so only what is alive together crosses a threshold.
        before = gc.get_stats()[2]["collections"]
        for _ in range(1_000):
            in_flight = [[index] for index in range(3_000)]
            del in_flight
        return gc.get_stats()[2]["collections"] - before

    gc.collect()
    default = full_collections_while_serving()
    middle, old = gc.get_threshold()[1:]
    widen_young_generation()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old), gc.get_threshold()
    widened = full_collections_while_serving()
    assert default >= 5, default
    assert widened <= default / 5, (default, widened)
    gc.set_threshold(YOUNG_THRESHOLD * 2, middle, old)
    widen_young_generation()
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD * 2, "a larger threshold was lowered"
    print("ok", default, widened)
    """
)


def test_objects_in_flight_die_young_instead_of_bringing_on_full_collections() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok"), done.stdout
