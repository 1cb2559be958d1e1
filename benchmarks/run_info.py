"""What a benchmark run ran on: the date, the machine, the software versions and the commit, recorded beside the
figures in `python -m benchmarks --json` so that `benchmarks/RESULTS.md` can say where its numbers come from.

Every field is read from the machine at the start of the run (the load average also at its end: figures from a
machine with other work on it are noisier, and the ratios are what stays comparable). A value that cannot be
read (no Java on PATH, not a git checkout) is None rather than an error: the benchmarks run without them.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks.kafka_broker import KAFKA_VERSION

REPO_ROOT = Path(__file__).resolve().parents[1]
# The distributions whose versions decide the figures: the runtime (Ray, RayDP, Spark), the data path (Arrow,
# NumPy, pandas, the CRC) and the clients measured or used as baselines.
PACKAGES = (
    "ray",
    "raydp",
    "pyspark",
    "pyarrow",
    "numpy",
    "pandas",
    "crc32c",
    "confluent-kafka",
    "kafka-python",
)
COMMAND_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run's circumstances (field names are the JSON keys)."""

    started_utc: str
    mode: str  # "full" or "quick"
    only: list[str] | None  # the `--only` names, None for every figure
    duration_s: float | None
    os: str
    cpu_model: str | None
    cores: int | None
    memory_gib: float
    load_average_start: list[float]
    load_average_end: list[float] | None
    python: str
    java: str | None
    apache_kafka: str
    packages: dict[str, str | None]
    commit: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunInfo:
        return cls(**data)


def collect(mode: str, only: list[str] | None) -> RunInfo:
    """The circumstances at the start of a run; `finished` completes them at its end."""
    return RunInfo(
        started_utc=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        mode=mode,
        only=only,
        duration_s=None,
        os=f"{platform.system()} {platform.release()} {platform.machine()}",
        cpu_model=cpu_model(),
        cores=os.cpu_count(),
        memory_gib=round(psutil.virtual_memory().total / 2**30, 1),
        load_average_start=_load_average(),
        load_average_end=None,
        python=platform.python_version(),
        java=java_version(),
        apache_kafka=KAFKA_VERSION,
        packages={name: _package_version(name) for name in PACKAGES},
        commit=commit(),
    )


def finished(info: RunInfo, duration_s: float) -> RunInfo:
    return RunInfo(**{**asdict(info), "duration_s": round(duration_s, 1), "load_average_end": _load_average()})


def cpu_model() -> str | None:
    """The `model name` of /proc/cpuinfo (Linux), else what `platform` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name":
                return value.strip()
    return platform.processor() or None


def java_version() -> str | None:
    """The first line of `java -version` (printed on stderr), e.g. `openjdk version "17.0.15" 2025-04-15`."""
    try:
        result = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (result.stderr or result.stdout).splitlines()
    return lines[0].strip() if result.returncode == 0 and lines else None


def commit() -> str | None:
    """The checked-out commit, with ` + uncommitted changes` when tracked files differ from it."""
    head = _command(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"])
    if head is None:
        return None
    changed = _command(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
    return f"{head} + uncommitted changes" if changed else head


def _load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _command(argv: list[str]) -> str | None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None
