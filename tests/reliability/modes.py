"""How hard the reliability suite pushes: a quick mode inside the normal test run, a long one on demand.

`RAYBROKER_RELIABILITY=long python -m pytest -m reliability` runs the long mode (more kills, more fuzz
examples, longer load); anything else runs the quick mode, sized to keep the whole suite well under 20 minutes.
"""

from __future__ import annotations

import os

LONG = os.environ.get("RAYBROKER_RELIABILITY") == "long"


def scaled(quick: int, long: int) -> int:
    """`long` in the long mode, `quick` otherwise."""
    return long if LONG else quick
