"""Where raybroker keeps what it downloads on first use, so later runs start offline.

One folder, `$RAYBROKER_CACHE` (default `$XDG_CACHE_HOME/raybroker`, else `~/.cache/raybroker`), holds:

- `kafka-<version>/libs`: Apache Kafka's broker jars, for the differential tests and the benchmarks, fetched with
  Maven by `benchmarks.kafka_broker`;
- `m2/`: Maven's local repository for that fetch (in place of `~/.m2`);
- `ivy2/`: Spark's Ivy home (`spark.jars.ivy`, in place of `~/.ivy2`): Spark's Kafka connector and its
  dependencies.

CI points `RAYBROKER_CACHE` at a folder its script names, outside the empty `HOME` it runs with, so nothing
else left in a home directory can make a run pass.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_VARIABLE = "RAYBROKER_CACHE"


def cache_root() -> Path:
    """The download cache folder (see the module docstring); not created here."""
    named = os.environ.get(CACHE_VARIABLE)
    if named:
        return Path(named).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "raybroker"


def maven_repository() -> Path:
    """Maven's local repository for the project's own fetches."""
    return cache_root() / "m2"


def ivy_home() -> Path:
    """Spark's Ivy home (`spark.jars.ivy`) for Spark's Kafka connector."""
    return cache_root() / "ivy2"
