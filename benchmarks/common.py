"""What every benchmark shares: the figure it reports, the context it runs in, timing and progress helpers.

A benchmark module (`benchmarks/bench_<what>.py`) exposes `run(ctx: BenchContext) -> list[Figure]`. Each figure
is measured next to its baseline in the same run, because absolute times with other work running drift from
run to run while the ratio of two measurements taken side by side holds. `ratio` is always "ours / baseline" for
throughputs (higher is better); for figures without a baseline it is None and `met` compares the value with the
goal directly.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from benchmarks.environment import RayEnvironment


@dataclass(frozen=True, slots=True)
class Curves:
    """What a figure's plot shows (`python -m benchmarks.results --plots`): a line per side, each its (x, y) points
    in the order drawn, with the axes' labels and scales. A figure that is one number has none."""

    title: str
    x_label: str
    y_label: str
    lines: dict[str, list[tuple[float, float]]]
    log_x: bool = False
    log_y: bool = False

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Curves:
        lines = {name: [(float(x), float(y)) for x, y in points] for name, points in document.pop("lines").items()}
        return cls(lines=lines, **document)


@dataclass(frozen=True, slots=True)
class Figure:
    """One row of the table and of the JSON list (field names are the JSON keys)."""

    name: str
    value: float
    unit: str
    baseline_name: str | None
    baseline_value: float | None
    ratio: float | None
    goal: str
    met: bool | None
    curves: Curves | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Figure:
        """The figure `to_json` wrote (a run written before figures had curves has no "curves" key)."""
        curves = document.pop("curves", None)
        return cls(**document, curves=None if curves is None else Curves.from_json(dict(curves)))


def throughput_figure(
    name: str,
    value: float,
    unit: str,
    baseline_name: str,
    baseline_value: float,
    min_ratio: float | None,
    goal: str,
    curves: Curves | None = None,
) -> Figure:
    """A higher-is-better figure against its baseline; `met` is `ratio >= min_ratio` (None: report only)."""
    ratio = value / baseline_value if baseline_value > 0 else None
    met = None if min_ratio is None or ratio is None else ratio >= min_ratio
    return Figure(name, value, unit, baseline_name, baseline_value, ratio, goal, met, curves)


def absolute_figure(name: str, value: float, unit: str, goal: str, met: bool | None) -> Figure:
    """A figure without a baseline (latencies, counts)."""
    return Figure(name, value, unit, None, None, None, goal, met)


@dataclass(slots=True)
class BenchContext:
    """Where a benchmark runs: `quick` shrinks every workload (the whole command takes minutes, not an hour);
    `workdir` is a fresh folder removed afterwards; `environment.broker()` starts (once per run) the embedded Ray
    and broker the actor and Spark benchmarks share; `progress` prints one line (to stderr, so `--json -` stays
    clean)."""

    quick: bool
    workdir: Path
    environment: RayEnvironment
    started_s: float = field(default_factory=time.perf_counter)

    def progress(self, message: str) -> None:
        elapsed = time.perf_counter() - self.started_s
        print(f"[{elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)

    def scratch(self, name: str) -> Path:
        """A new empty folder under the work dir."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workdir))
        return path


@contextmanager
def timer() -> Iterator[Callable[[], float]]:
    """`with timer() as elapsed: ...; elapsed()` gives seconds, with the garbage collector paused inside."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    start = time.perf_counter()
    end: float | None = None

    def elapsed() -> float:
        return (end if end is not None else time.perf_counter()) - start

    try:
        yield elapsed
    finally:
        end = time.perf_counter()
        if gc_was_enabled:
            gc.enable()


# What each run of `best_rates` returns.
T = TypeVar("T")


def best_rates(runs: Mapping[str, Callable[[], T]], repeats: int, count: int) -> tuple[dict[str, float], dict[str, T]]:
    """Every one of `runs` in turn, for `repeats` rounds: each one's best rate (`count` per second of a run; noise
    only ever slows a run) and what its last run returned. Round by round rather than one after the other, so that
    a slow stretch of the machine falls on all of them."""
    best = dict.fromkeys(runs, 0.0)
    results: dict[str, T] = {}
    for _ in range(repeats):
        for name, run in runs.items():
            with timer() as elapsed:
                results[name] = run()
            best[name] = max(best[name], count / elapsed())
    return best, results


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list (fraction 0.5 = p50, 0.99 = p99)."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(0, min(len(sorted_values) - 1, math.ceil(fraction * len(sorted_values)) - 1))
    return sorted_values[rank]


def drop_page_cache_hint(path: Path) -> None:
    """Asks the kernel to forget a file's cached pages (best effort; needs no privileges for our own files), so a
    'recovery after a crash' read comes from disk in both the measured run and the baseline."""
    with open(path, "rb") as file:
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
