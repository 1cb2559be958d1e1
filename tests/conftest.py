"""Fixtures shared by every test package (where the golden files live, the session's Ray and broker) and the
test tiers.

Tiers: the markers `ray`, `spark` and `kafka` say that a test starts Ray, Spark or Apache Kafka (or uses a
fixture that does); every other test gets the marker `fast` here, so `python -m pytest -m fast` runs what needs
none of them, except the ones marked `slow` by hand: tests of many random histories or of a race under stress that
need no outside program but take seconds each, run in parallel in a tier of their own (`-m slow -n auto`) so the fast
tier stays within its three minutes. A test cannot sit in the fast tier by mistake:
- at collection, a test that uses a fixture of `STARTED_BY_FIXTURE` (`ray_session`, `spark`, `kafka`, directly or
  through other fixtures, as `start_test_broker` does) without that fixture's marker stops the run with a
  message naming it;
- while a fast test runs, starting a program of Ray, Spark or Kafka (`HEAVY_PROGRAM`, `HEAVY_COMMAND`: Ray's
  daemons, which an in-process `ray.init` or `Cluster` starts too, a JVM, `raybroker start` or `demo`, `ray
  start`) raises at the `subprocess.Popen` (a Python audit hook), and the test fails, as it does if Ray was
  attached during it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

TESTS_DIR = Path(__file__).resolve().parent
# Log dirs a real Kafka broker wrote, committed with the tests (provenance and licences in its PROVENANCE.md).
KAFKA_SAMPLES_DIR = TESTS_DIR / "fixtures" / "kafka"


# `.ci/run` sets it to 1: there a test must not pass by skipping what the machine lacks.
CI_VARIABLE = "RAYBROKER_CI"


def skip_or_fail(reason: str) -> NoReturn:
    """Skips a test whose outside part is missing here (Apache Kafka not fetchable, a port taken, a head running);
    under `.ci/run` it fails instead, so CI cannot pass by skipping a missing step."""
    if os.environ.get(CI_VARIABLE) == "1":
        pytest.fail(f"{reason} (under .ci/run, where nothing may be skipped for lack of it)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def kafka_samples_dir() -> Path:
    """Log dirs written by a real Kafka broker (`tests/fixtures/kafka/`, see its PROVENANCE.md)."""
    return KAFKA_SAMPLES_DIR


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """Golden files committed with the tests (`tests/fixtures/`)."""
    return TESTS_DIR / "fixtures"


# --- tiers ---------------------------------------------------------------------------------------------

HEAVY_MARKERS = ("ray", "spark", "kafka")
# Set by hand on a test that needs none of them but takes seconds: out of the fast tier, into one of its own.
SLOW_MARKER = "slow"
# Fixtures that start what a marker names; a test using one, however indirectly, must carry that marker.
STARTED_BY_FIXTURE = {"ray_session": "ray", "spark": "spark", "kafka": "kafka"}
# What only a `ray`, `spark` or `kafka` test may start: Ray's daemons, a JVM (Spark's driver, Apache Kafka), and
# the commands that start Ray (`raybroker start` a head, `raybroker demo` an embedded Ray, `ray start`).
HEAVY_PROGRAM = re.compile(r"(gcs_server|raylet|java|spark-submit)")
HEAVY_COMMAND = re.compile(r"\b(raybroker|cluster\.cli\.main)\s+(start|demo)\b|\bray\s+start\b")

_fast_test: str | None = None  # the node id of the fast test running, if one is
_heavy_starts: list[str] = []  # what the running fast test tried to start


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every test that starts none of Ray, Spark and Kafka `fast` (see the module docstring), and moves the
    modules that shut the session's Ray down for a cluster of their own (`OWNS_RAY = True`, e.g.
    `tests/actors/test_zz_multinode.py`) after every other test, wherever their path sorts."""
    problems = []
    for item in items:
        markers = {marker.name for marker in item.iter_markers()}
        if "fast" in markers:
            problems.append(f"{item.nodeid}: `fast` is set by tests/conftest.py, never by hand")
        fixtures = set(getattr(item, "fixturenames", ()))
        for fixture, marker in STARTED_BY_FIXTURE.items():
            if fixture in fixtures and marker not in markers:
                problems.append(f"{item.nodeid}: uses the fixture `{fixture}` (directly or not): mark it `{marker}`")
        if SLOW_MARKER in markers and markers & set(HEAVY_MARKERS):
            problems.append(f"{item.nodeid}: `slow` is for tests that start none of Ray, Spark and Kafka")
        if not markers & {*HEAVY_MARKERS, SLOW_MARKER}:
            item.add_marker(pytest.mark.fast)
    if problems:
        raise pytest.UsageError("tests in the wrong tier:\n" + "\n".join(problems))
    last = [item for item in items if getattr(getattr(item, "module", None), "OWNS_RAY", False)]
    if last:
        moved = set(last)
        items[:] = [item for item in items if item not in moved] + last


def _refuse_heavy_starts(event: str, args: tuple[Any, ...]) -> None:
    """Audit hook: a fast test (on the main thread; Ray's and Spark's own threads are not the test's) may not
    start what `HEAVY_PROGRAM` and `HEAVY_COMMAND` name."""
    if event != "subprocess.Popen" or _fast_test is None or threading.current_thread() is not threading.main_thread():
        return
    executable, argv = args[0], args[1]
    words = [os.fsdecode(word) for word in ([argv] if isinstance(argv, str | bytes | os.PathLike) else argv)]
    program = Path(os.fsdecode(executable) if executable is not None else words[0]).name
    if HEAVY_PROGRAM.fullmatch(program) or HEAVY_COMMAND.search(" ".join(words)):
        started = " ".join(words)[:200]
        _heavy_starts.append(started)
        raise RuntimeError(f"{_fast_test} is in the fast tier but starts `{started}`: mark it ray, spark or kafka")


sys.addaudithook(_refuse_heavy_starts)


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a fast (or slow) test that started Ray, Spark or Kafka, or attached this process to Ray."""
    global _fast_test
    if request.node.get_closest_marker("fast") is None and request.node.get_closest_marker(SLOW_MARKER) is None:
        yield
        return
    ray_was_attached = _ray_attached()
    _fast_test = request.node.nodeid
    _heavy_starts.clear()
    try:
        yield
    finally:
        _fast_test = None
    if _heavy_starts:
        pytest.fail(f"a fast test started {_heavy_starts}: mark it ray, spark or kafka")
    if _ray_attached() and not ray_was_attached:
        pytest.fail("a fast test attached to Ray (ray.init): mark it ray")


def _ray_attached() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


# --- Ray: one local cluster per test session (starting Ray takes seconds) -----------------


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A real local Ray, shared by every `ray`/`spark` test; shut down (with any broker) at the end.

    `RAY_LOG_TO_DRIVER=0` in the environment before `ray.init` (with log forwarding on, Spark's Python workers
    feed their own output back in a loop that grew a worker log to 213 MB in a minute here), 4 logical CPUs so
    the Spark executor's 2 cores still leave room for tasks, no dashboard.
    """
    os.environ["RAY_LOG_TO_DRIVER"] = "0"
    import ray

    ray.init(
        # Never join a cluster another process left in /tmp/ray/ray_current_cluster (`ray start`, Cluster).
        address="local",
        num_cpus=4,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        namespace="raybroker",
    )
    try:
        yield
    finally:
        _stop_running_broker()
        ray.shutdown()


def _stop_running_broker() -> None:
    """Stops the broker if one runs; a no-op when Ray is already down (`test_zz_multinode` shuts it down)."""
    import ray

    from actors.clients.broker import stop_broker
    from storage.errors import BrokerNotAvailableError

    if not ray.is_initialized():
        return
    with contextlib.suppress(BrokerNotAvailableError):
        stop_broker()


# Intervals short enough that scheduled work (retention, checkpoints, cleaning) happens within a test, and
# partitions opened in shared host processes (`log.partitions.per.process`, 16 as by default) with no spare host
# started ahead (`log.partitions.spare.processes`, 1 by default): each actor process costs ~1.5 s of CPU to start,
# which made topic creation most of the time of the tests on Ray (four modules: 71 s against
# 117 s with one actor per partition), and a test broker rarely fills its first host. Tests of a partition actor's
# own process (killed, restarted, its dir offline) start their broker with `ONE_ACTOR_PER_PARTITION`.
FAST_BROKER_PROPERTIES = {
    "log.initial.task.delay.ms": "200",
    "log.retention.check.interval.ms": "500",
    "log.flush.offset.checkpoint.interval.ms": "500",
    "log.flush.start.offset.checkpoint.interval.ms": "500",
    "replica.high.watermark.checkpoint.interval.ms": "500",
    "log.cleaner.backoff.ms": "500",
    "log.segment.delete.delay.ms": "500",
    "offsets.topic.num.partitions": "2",
    "log.index.size.max.bytes": "65536",
    "log.partitions.per.process": "16",
    "log.partitions.spare.processes": "0",
}
# `start_test_broker(**ONE_ACTOR_PER_PARTITION)`: each partition in an actor process of its own.
ONE_ACTOR_PER_PARTITION = {"log_partitions_per_process": "1"}


@pytest.fixture(scope="session")
def start_test_broker(
    ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., tuple[Any, list[Path]]]:
    """Starts a broker (stopping any running one) over fresh log dirs; returns (Broker, log dirs).

    Keyword arguments are broker properties with underscores for dots, e.g. `log_dirs_count=2`,
    `log_retention_check_interval_ms="200"`.
    """
    from actors.clients.broker import Broker, start_broker

    def start(log_dirs_count: int = 2, log_dirs: list[Path] | None = None, **overrides: str) -> tuple[Any, list[Path]]:
        _stop_running_broker()
        if log_dirs is None:
            root = tmp_path_factory.mktemp("broker")
            log_dirs = [root / f"dir{index}" for index in range(log_dirs_count)]
        properties = {**FAST_BROKER_PROPERTIES, "log.dirs": ",".join(str(d) for d in log_dirs)}
        properties.update({key.replace("_", "."): str(value) for key, value in overrides.items()})
        start_broker(properties)
        return Broker.connect(), log_dirs

    return start
