"""Soak test: a broker left running for a month keeps its state bounded and its files tidy.

`test_thirty_simulated_days_keep_state_bounded` drives the plain `LogManager` (the class the log-manager actor
runs) and its cleaner on a `MockClock` through 30 simulated days, with the broker's periodic work on Kafka's
own intervals (retention every 5 min, checkpoints every 5 s / 60 s, the cleaner every 15 s, producer-id
expiration every 10 min after `producer.id.expiration.ms` of one day): the clock moves one step at a time and
the scheduler runs what is due. Traffic: short-lived idempotent producers (each takes a new producer id, as
every Python `Producer` does, sends a batch in each of 3 steps of the clock and is never seen again; 1,000 in the
quick mode, 10,000 in the long one) and plain batches, over four partitions:

- `events` (2 partitions): time retention (1 day) and size retention (256 KiB);
- `state`: compacted, 100 keys, cleaned whenever 10% of it is dirty;
- `trimmed`: no retention of its own; a DeleteRecords every simulated day moves its log start.

The broker restarts cleanly on day 15, so the snapshot load (and its expiration filter) is part of the run.
Each simulated day the test samples producer-state entries, `.snapshot` files, open file descriptors
(/proc/self/fd), memory maps (/proc/self/maps lines) and RSS, and asserts:

- absolute bounds: producer entries never exceed the producers that wrote within the last expiration plus one
  check interval (the oracle, counted from what the test sent) and never fall below those that wrote within
  the last expiration; each partition has at most one snapshot per segment plus one; descriptors and maps grow
  by at most a few per live segment over the process's baseline;
- no growth with time: the max of each figure over the last 10 days exceeds its max over days 5-15 by at
  most a small constant (`GROWTH_SLACK`).

`test_broker_on_ray_keeps_state_bounded` (long mode only) runs the real broker on Ray for 10 minutes of wall
time with producers coming and going, and applies the same no-growth rule to the partition actors' processes.
The figures each run saw are printed (`-s` shows them).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import ray

from actors import Admin, Broker
from actors import Producer as ClientProducer
from storage import file_names
from storage.clock import MockClock
from storage.config.broker_config import BrokerConfig
from storage.config.log_config import LogConfig
from storage.logdir.log_manager import LogManager
from storage.logdir.scheduler import Scheduler
from storage.partition.log import Log
from storage.records.record_batch import RecordBatchBuilder
from tests.reliability.modes import LONG, scaled
from tests.reliability.storage_checks import shm_path_fixture  # noqa: F401 - the `shm_path` fixture
from tests.storage.builders import START_MS

pytestmark = pytest.mark.reliability

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
DAYS = 30
PRODUCERS = scaled(1_000, 10_000)
# The clock moves this much between two scheduler runs: every task whose interval is shorter runs once a
# step (the scheduler coalesces missed periods, as a late Kafka scheduler thread would).
STEP_MS = scaled(20, 5) * MINUTE_MS
STEPS = DAYS * DAY_MS // STEP_MS
# Kafka's defaults, stated so the oracle below does not depend on BrokerConfig's.
PRODUCER_ID_EXPIRATION_MS = DAY_MS
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 10 * MINUTE_MS
BATCHES_PER_PRODUCER = 3
VALUE = b"v" * 200
STATE_KEYS = 100
PARTITIONS = (("events", 0), ("events", 1), ("state", 0), ("trimmed", 0))
TOPIC_CONFIGS = {
    "events": {"retention.ms": str(DAY_MS), "retention.bytes": str(256 * 1024)},
    "state": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"},
    "trimmed": {"retention.ms": "-1"},
}
# How much a figure's max over the last 10 days may exceed its max over days 5-15: the day-to-day jitter of
# segments rolling, a cleaning in progress and the allocator, never a per-day growth (30 days x anything).
RAY_PARTITIONS = 2
GROWTH_SLACK = {"producers": 40, "snapshots": 8, "fds": 16, "maps": 64, "rss_kib": 16 * 1024}


def broker_config(log_dir: Path) -> BrokerConfig:
    """Kafka's intervals and defaults, except small segments (many rolls in a month) and a small offset map."""
    return BrokerConfig.from_properties(
        {
            "log.dirs": str(log_dir),
            "log.segment.bytes": str(16 * 1024),
            "log.roll.hours": "6",
            "log.index.size.max.bytes": str(4 * 1024),
            "log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024),
            "producer.id.expiration.ms": str(PRODUCER_ID_EXPIRATION_MS),
            "producer.id.expiration.check.interval.ms": str(PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS),
        }
    )


@dataclass
class SimulatedBroker:
    """A started `LogManager` and the scheduler that runs its periodic work."""

    manager: LogManager
    scheduler: Scheduler
    logs: dict[tuple[str, int], Log]


def start(config: BrokerConfig, clock: MockClock) -> SimulatedBroker:
    """Starts (or restarts: the topic settings are passed again, as the controller does) the log manager."""
    topic_configs = {
        topic: LogConfig.from_properties(settings, base=config.log_config) for topic, settings in TOPIC_CONFIGS.items()
    }
    manager = LogManager.from_broker_config(
        config, topic_configs=topic_configs, clock=clock, cluster_id="soak-cluster-id-00000"
    )
    manager.startup()
    logs = {(topic, partition): manager.get_or_create_log(topic, partition) for topic, partition in PARTITIONS}
    scheduler = Scheduler(clock)
    manager.schedule(scheduler, config)
    return SimulatedBroker(manager, scheduler, logs)


def batch(now_ms: int, key: bytes, producer_id: int = -1, sequence: int = -1) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence
    )
    builder.append(key, VALUE, timestamp=now_ms)
    return builder.build()


@dataclass
class Producer:
    """One short-lived idempotent producer: its id, its partition, its next sequence, its last write."""

    producer_id: int
    tp: tuple[str, int]
    sequence: int = 0
    last_write_ms: int = -1


def proc_figures() -> dict[str, int]:
    """Open descriptors, memory maps and resident KiB of this process."""
    with open("/proc/self/status") as status:
        rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    with open("/proc/self/maps") as maps:
        map_count = sum(1 for _ in maps)
    return {"fds": len(os.listdir("/proc/self/fd")), "maps": map_count, "rss_kib": rss_kib}


def snapshot_count(folder: Path) -> int:
    return sum(1 for path in folder.iterdir() if path.name.endswith(file_names.PRODUCER_SNAPSHOT_SUFFIX))


@dataclass
class Samples:
    """One sample per simulated day of each figure."""

    days: list[dict[str, int]] = field(default_factory=list)

    def series(self, name: str) -> list[int]:
        return [day[name] for day in self.days]

    def report(self) -> str:
        lines = []
        for name in GROWTH_SLACK:
            values = self.series(name)
            lines.append(
                f"{name}: max {max(values)}, days 5-15 max {max(values[5:15])}, last 10 days max {max(values[-10:])}"
            )
        return "; ".join(lines)


def assert_no_growth(samples: Samples) -> None:
    for name, slack in GROWTH_SLACK.items():
        values = samples.series(name)
        assert max(values[-10:]) <= max(values[5:15]) + slack, (name, values)


@pytest.mark.slow
def test_thirty_simulated_days_keep_state_bounded(shm_path: Path) -> None:
    clock = MockClock(START_MS)
    config = broker_config(shm_path / "data")
    broker = start(config, clock)
    baseline = proc_figures()
    producers: list[Producer] = []
    active: list[Producer] = []
    samples = Samples()
    for step in range(1, STEPS + 1):
        clock.sleep(STEP_MS)
        now_ms = clock.milliseconds()
        while len(producers) < PRODUCERS * step // STEPS:
            producer_id = len(producers)
            producers.append(Producer(producer_id, PARTITIONS[producer_id % len(PARTITIONS)]))
            active.append(producers[-1])
        # A producer sends one batch a step, then stops for good.
        for producer in active:
            key = b"k%03d" % (producer.producer_id % STATE_KEYS)
            broker.logs[producer.tp].append(batch(now_ms, key, producer.producer_id, producer.sequence))
            producer.sequence += 1
            producer.last_write_ms = now_ms
        active = [producer for producer in active if producer.sequence < BATCHES_PER_PRODUCER]
        for index, tp in enumerate(PARTITIONS):
            broker.logs[tp].append(batch(now_ms, b"k%03d" % ((step + index) % STATE_KEYS)))
        broker.scheduler.run_due()
        if step % (DAY_MS // STEP_MS) == 0:
            trimmed = broker.logs[("trimmed", 0)]
            trimmed.delete_records(max(trimmed.log_start_offset, trimmed.high_watermark - 50))
            samples.days.append(sample(broker, producers, now_ms, baseline))
        if step == STEPS // 2:
            broker.manager.shutdown()
            broker = start(config, clock)
    broker.manager.shutdown()
    print(f"\nsoak, {PRODUCERS} producers over {DAYS} days (baseline {baseline}): {samples.report()}")
    assert len(samples.days) == DAYS
    assert_no_growth(samples)


def sample(broker: SimulatedBroker, producers: list[Producer], now_ms: int, baseline: dict[str, int]) -> dict[str, int]:
    """Today's figures, after checking the absolute bounds."""
    # A producer is forgotten at the first check after it has been idle for the expiration, so between
    # checks it may be known up to one interval longer.
    recent = sum(now_ms - p.last_write_ms < PRODUCER_ID_EXPIRATION_MS for p in producers if p.last_write_ms >= 0)
    known_at_most = sum(
        now_ms - p.last_write_ms < PRODUCER_ID_EXPIRATION_MS + PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS + STEP_MS
        for p in producers
        if p.last_write_ms >= 0
    )
    entries = sum(log.producer_count for log in broker.logs.values())
    assert recent <= entries <= known_at_most, (recent, entries, known_at_most)
    segments = 0
    snapshots = 0
    for log in broker.logs.values():
        in_folder = snapshot_count(log.directory)
        assert in_folder <= log.num_segments + 1, (log, in_folder)
        snapshots += in_folder
        segments += log.num_segments
    figures = proc_figures()
    # Per live segment: its `.log` descriptor and its two index files, each open and mapped (Python's mmap keeps
    # a duplicate of the descriptor it maps).
    assert figures["fds"] <= baseline["fds"] + 5 * segments + 16, (figures, segments)
    assert figures["maps"] <= baseline["maps"] + 2 * segments + 128, (figures, segments)
    return {"producers": entries, "snapshots": snapshots, **figures}


@pytest.mark.ray
@pytest.mark.skipif(not LONG, reason="the long mode runs the broker on Ray for 10 minutes")
def test_broker_on_ray_keeps_state_bounded(start_test_broker: Callable[..., tuple[Broker, list[Path]]]) -> None:
    """Producers come and go (each a new producer id) for `RAYBROKER_SOAK_WALL_S` seconds (default 600);
    30 samples ("days") of the partition processes' figures. Kafka's time settings are scaled to the run as the
    simulated month scales them to 30 days: expiration and retention last one and two "days", segments roll
    four times a "day"."""
    wall_s = float(os.environ.get("RAYBROKER_SOAK_WALL_S", "600"))
    day_ms = int(wall_s * 1000 / DAYS)
    broker, _ = start_test_broker(
        log_dirs_count=1,
        log_retention_check_interval_ms=str(day_ms // 10),
        producer_id_expiration_ms=str(day_ms),
        producer_id_expiration_check_interval_ms=str(day_ms // 10),
    )
    topic_config = {"retention.ms": str(2 * day_ms), "segment.ms": str(day_ms // 4)}
    Admin(broker).create_topic("soak", partitions=RAY_PARTITIONS, config=topic_config)
    samples = Samples()
    started = time.monotonic()
    while time.monotonic() - started < wall_s:
        with ClientProducer(broker) as producer:
            for index in range(20):
                producer.send("soak", VALUE, key=b"k%d" % index).result()
        if len(samples.days) < int((time.monotonic() - started) / (wall_s / 30)):
            samples.days.append(ray_sample(broker))
    print(f"\nsoak on Ray for {wall_s:.0f} s: {samples.report()}")
    assert len(samples.days) >= 20
    assert_no_growth(samples)


def ray_sample(broker: Broker) -> dict[str, int]:
    """The partition processes' figures, summed (producer entries from their states)."""
    totals = {"producers": 0, "snapshots": 0, "fds": 0, "maps": 0, "rss_kib": 0}
    for partition in range(RAY_PARTITIONS):
        state = ray.get(broker.partition("soak", partition).state.remote())
        totals["producers"] += state.producer_count
        totals["snapshots"] += snapshot_count(Path(state.directory))
        proc = Path(f"/proc/{state.pid}")
        totals["fds"] += len(os.listdir(proc / "fd"))
        totals["maps"] += len((proc / "maps").read_text().splitlines())
        status = (proc / "status").read_text().splitlines()
        totals["rss_kib"] += next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return totals
