"""The OpenMessaging Benchmark's Kafka workloads against raybroker on three Ray nodes and Apache Kafka with three
brokers, both on this machine, in the same run.

| figure               | what                                                  | baseline                           |
|----------------------|-------------------------------------------------------|------------------------------------|
| `omb_throughput`     | MB/s published at the maximum rate, OMB workload      | Apache Kafka 3.9.1 with three      |
|                      | `1-topic-100-partitions-1kb` (1 producer, 1 consumer, | brokers (KRaft,                    |
|                      | 1 KiB payloads), driver profile `kafka-throughput`    | `benchmarks.kafka_cluster`), the   |
|                      | (RF 3, `min.insync.replicas=2`, acks=all, linger 1    | same OMB build, workload, profile  |
|                      | ms, 1 MiB batches)                                    |                                    |
| `omb_throughput_16p` | the same, `1-topic-16-partitions-1kb` (full run only) | the same                           |
| `omb_e2e_p99`        | end-to-end p99 (ms, the record's timestamp to the     | Kafka's p99 at the same rate       |
|                      | consumer's receipt) of the 100-partition workload at  |                                    |
|                      | a fixed rate of half Kafka's best `omb_throughput`    |                                    |
| `omb_exactly_once`   | MB/s at the maximum rate, profile `kafka-exactly-once` | the same on Kafka                 |
|                      | (idempotent, one request in flight per connection;    |                                    |
|                      | full run only)                                        |                                    |

OMB is built from its pinned source (`benchmarks.omb_build`); what runs is its `LocalWorker` and Kafka driver (stock
`kafka-clients` 3.6.1) driven by `benchmarks/java/OmbRun.java`, which goes through OMB's WorkloadGenerator's
steps (topic, consumer, producer, probe, load, warm-up, reset, measure) with phases of seconds, where the
generator's are whole minutes. Each run is a JVM of its own with a new topic, as each OMB workload run is, and the
topic is deleted after it (`_delete_topic` says why). The maximum rate is a publish rate no producer reaches
(`MAX_RATE`), so the producer is held back only by its 32 MiB buffer, that is by the broker's acknowledgements;
OMB's own max-rate mode instead steers the rate to what the consumer keeps up with, which needs minutes to settle.
The goal text gives each side's consume rate beside it.

raybroker runs as `produce_rf3_kafka` runs it (`benchmarks.bench_replication_kafka`: three Ray nodes, a broker and
a Kafka listener on each, Ray's workers at niceness 0 as Kafka's JVMs). The sides alternate, the first side
swapped every round; each figure is the best of N (noise only slows a run: the highest MB/s, the lowest p99) with
the median in the goal text. An e2e run that publishes under `SUSTAINED` of the fixed rate did not keep up: the
figure is then unmet whatever its p99. Like the other multi-node modules it stops the shared Ray first and leaves
nothing running. A full run is 20 OMB runs (~30 s each on a quiet machine) after the clusters' start: ~12
minutes; `--quick` is 4 runs, ~3 minutes. On a machine whose load average is in the tens each run takes minutes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_replication import stop_shared_ray, three_nodes
from benchmarks.bench_replication_kafka import WORKER_NICENESS, start_listeners
from benchmarks.common import BenchContext, Curves, Figure, throughput_figure
from benchmarks.java_build import compile_against, require_jdk
from benchmarks.kafka_broker import KAFKA_VERSION
from benchmarks.kafka_cluster import KafkaCluster
from benchmarks.omb_build import OMB_COMMIT, OmbUnavailable, driver_file, omb_classpath, payload_file
from benchmarks.processes import QUIET

SIDES = ("raybroker", "kafka")
MESSAGE_BYTES = 1024
PARTITIONS = 100
SMALL_PARTITIONS = 16
# Messages/s that no producer here reaches (Kafka's best here is ~10k-100k 1 KiB msg/s): the rate limiter never
# waits and the producer's buffer sets the pace.
MAX_RATE = 10_000_000.0
# An e2e run counts as keeping the fixed rate if it published at least this share of it.
SUSTAINED = 0.95
OMB_HEAP = "-Xmx1g"
# A run's JVM: start, topic creation and the consumer's join (~10-20 s) around its warm-up and measured window.
RUN_TIMEOUT_S = 300.0
# What starts `OmbRun`'s result line (OMB's log lines share its stdout).
RESULT_PREFIX = "omb-result: "
# How long deleting a finished run's topic may take.
DELETE_TIMEOUT_S = 120.0
# The driver profiles' placeholder, replaced by each side's bootstrap servers.
BOOTSTRAP_PLACEHOLDER = "bootstrap.servers=localhost:9092"


@dataclass(frozen=True)
class Phases:
    """How long each OMB run warms up and measures, and how many runs each side gets: for `omb_throughput` and
    `omb_e2e_p99`, for `omb_throughput_16p`, for `omb_exactly_once` (none: the figure is not measured)."""

    warm_up_s: float
    test_s: float
    repeats: int
    small_partitions_repeats: int
    exactly_once_repeats: int


# Full: 3 + 3 + 2 + 2 runs a side, ~30 s each (JVM start, topic, group join, warm-up, 15 s measured).
FULL = Phases(warm_up_s=5, test_s=15, repeats=3, small_partitions_repeats=2, exactly_once_repeats=2)
# Quick: one run per side of `omb_throughput` and `omb_e2e_p99` (~25 s each on a quiet machine), beside the ~60 s
# that three Ray nodes and three Kafka JVMs take to start.
QUICK = Phases(warm_up_s=3, test_s=6, repeats=1, small_partitions_repeats=0, exactly_once_repeats=0)


def run(ctx: BenchContext) -> list[Figure]:
    phases = QUICK if ctx.quick else FULL
    require_jdk("the OpenMessaging Benchmark")
    ctx.progress(f"  building OpenMessaging Benchmark {OMB_COMMIT[:7]} (cached after the first run) ...")
    classpath = compile_against(ctx, Path(__file__).parent / "java" / "OmbRun.java", omb_classpath())
    ctx.progress("  stopping the shared Ray: this module runs its own 3-node cluster")
    stop_shared_ray(ctx)
    with three_nodes(ctx, WORKER_NICENESS) as nodes:
        bootstrap = start_listeners(nodes)
        ctx.progress(f"  a Kafka listener on each node: {bootstrap}")
        with KafkaCluster() as kafka:
            runner = OmbRunner(ctx, classpath, {"raybroker": bootstrap, "kafka": kafka.bootstrap_servers})
            return measure(runner, phases)


class OmbRunner:
    """Runs `OmbRun` against either side: one JVM per run, its log in the work dir."""

    def __init__(self, ctx: BenchContext, classpath: str, bootstraps: dict[str, str]) -> None:
        self.ctx = ctx
        self.classpath = classpath
        self.drivers = {
            (side, profile): _driver_yaml(ctx, profile, side, bootstrap)
            for side, bootstrap in bootstraps.items()
            for profile in ("kafka-throughput", "kafka-exactly-once")
        }
        self.bootstraps = bootstraps
        self.runs = 0

    def run(self, side: str, profile: str, partitions: int, rate: float, phases: Phases) -> dict[str, Any]:
        """One OMB run's result (`OmbRun`'s JSON), its topic deleted after it; `OmbUnavailable` with the log's tail
        if it failed."""
        self.runs += 1
        log = self.ctx.workdir / f"omb-{self.runs:02d}-{side}-{profile}-{partitions}p.log"
        command = [
            "java",
            OMB_HEAP,
            "-cp",
            self.classpath,
            "OmbRun",
            str(self.drivers[side, profile]),
            str(partitions),
            str(MESSAGE_BYTES),
            str(payload_file()),
            str(rate),
            str(phases.warm_up_s),
            str(phases.test_s),
        ]
        # In the work dir: OMB's log4j configuration also writes `benchmark-worker.log` where the JVM runs.
        done = subprocess.run(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
            cwd=self.ctx.workdir,
        )
        log.write_text(done.stdout)
        lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        if done.returncode != 0 or len(lines) != 1:
            tail = "\n".join(done.stdout.splitlines()[-15:])
            what = f"{side} ({profile}, {partitions} partitions)"
            raise OmbUnavailable(f"OMB run on {what} exited {done.returncode}:\n{tail}")
        result: dict[str, Any] = json.loads(lines[0].removeprefix(RESULT_PREFIX))
        _delete_topic(self.bootstraps[side], result["topic"])
        return result


def measure(runner: OmbRunner, phases: Phases) -> list[Figure]:
    """Every figure of the module, in the order the module docstring lists them."""
    ctx = runner.ctx
    throughput = _rounds(runner, "kafka-throughput", PARTITIONS, MAX_RATE, phases.repeats, phases)
    figures = [_throughput_figure("omb_throughput", throughput, "kafka-throughput", PARTITIONS, phases)]
    if phases.small_partitions_repeats:
        repeats = phases.small_partitions_repeats
        small = _rounds(runner, "kafka-throughput", SMALL_PARTITIONS, MAX_RATE, repeats, phases)
        figures.append(_throughput_figure("omb_throughput_16p", small, "kafka-throughput", SMALL_PARTITIONS, phases))
    rate = max(result["publish_msgs_s"] for result in throughput["kafka"]) / 2
    ctx.progress(f"  fixed rate for omb_e2e_p99: {rate:,.0f} msg/s (half Kafka's best)")
    e2e = _rounds(runner, "kafka-throughput", PARTITIONS, rate, phases.repeats, phases)
    figures.append(_e2e_figure(e2e, rate, phases))
    if phases.exactly_once_repeats:
        repeats = phases.exactly_once_repeats
        exactly_once = _rounds(runner, "kafka-exactly-once", PARTITIONS, MAX_RATE, repeats, phases)
        figures.append(_throughput_figure("omb_exactly_once", exactly_once, "kafka-exactly-once", PARTITIONS, phases))
    return figures


def _rounds(
    runner: OmbRunner, profile: str, partitions: int, rate: float, repeats: int, phases: Phases
) -> dict[str, list[dict[str, Any]]]:
    """`repeats` rounds of one run per side, the first side swapped every round; each side's results."""
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for round_index in range(repeats):
        order = SIDES if round_index % 2 == 0 else SIDES[::-1]
        for side in order:
            result = runner.run(side, profile, partitions, rate, phases)
            results[side].append(result)
            runner.ctx.progress(
                f"  {profile} {partitions}p rate {'max' if rate == MAX_RATE else f'{rate:,.0f}'} "
                f"{round_index + 1}/{repeats} {side}: publish {result['publish_mb_s']:.1f} MB/s, consume "
                f"{result['consume_mb_s']:.1f} MB/s, e2e p99 {result['e2e_p99_ms']:.1f} ms, publish p99 "
                f"{result['publish_p99_ms']:.1f} ms, {result['publish_errors']} errors"
            )
    return results


def _best_and_median(values: list[float], higher_is_better: bool) -> tuple[float, float]:
    return (max(values) if higher_is_better else min(values)), statistics.median(values)


def _throughput_figure(
    name: str, results: dict[str, list[dict[str, Any]]], profile: str, partitions: int, phases: Phases
) -> Figure:
    best = {}
    notes = []
    for side in SIDES:
        published = [result["publish_mb_s"] for result in results[side]]
        best[side], median = _best_and_median(published, higher_is_better=True)
        consumed = max(result["consume_mb_s"] for result in results[side])
        errors = sum(result["publish_errors"] for result in results[side])
        notes.append(f"{side} median {median:.1f} MB/s, best consume {consumed:.1f} MB/s, {errors} publish errors")
    return throughput_figure(
        name,
        best["raybroker"],
        "MB/s",
        f"Apache Kafka {KAFKA_VERSION}, 3 brokers (same OMB build)",
        best["kafka"],
        1.0,
        f"ratio >= 1.0; OMB 1-topic-{partitions}-partitions-1kb, {profile} (RF 3, acks=all), max rate, best of "
        f"{len(results['kafka'])} runs of {phases.test_s:g} s after {phases.warm_up_s:g} s; " + "; ".join(notes),
    )


def _e2e_figure(results: dict[str, list[dict[str, Any]]], rate: float, phases: Phases) -> Figure:
    best = {}
    notes = []
    kept_rate = True
    for side in SIDES:
        p99s = [result["e2e_p99_ms"] for result in results[side]]
        best[side], median = _best_and_median(p99s, higher_is_better=False)
        published = min(result["publish_msgs_s"] for result in results[side])
        kept_rate = kept_rate and published >= SUSTAINED * rate
        p50 = min(result["e2e_p50_ms"] for result in results[side])
        p999 = min(result["e2e_p999_ms"] for result in results[side])
        publish_p99 = min(result["publish_p99_ms"] for result in results[side])
        notes.append(
            f"{side} median p99 {median:.1f} ms, best p50 {p50:.1f} / p99.9 {p999:.1f} ms, publish p99 "
            f"{publish_p99:.1f} ms, slowest run published {published:,.0f} msg/s"
        )
    ratio = best["raybroker"] / best["kafka"] if best["kafka"] > 0 else None
    met = None if ratio is None else ratio <= 1.0 and kept_rate
    # Each side's distribution is its run of the best p99, the run the figure reports.
    lines = {
        side: [(ms, percent) for percent, ms in min(results[side], key=lambda result: result["e2e_p99_ms"])["e2e_cdf"]]
        for side in SIDES
    }
    curves = Curves(f"end-to-end latency at {rate:,.0f} msg/s", "milliseconds", "percentile", lines, log_x=True)
    return Figure(
        "omb_e2e_p99",
        best["raybroker"],
        "ms",
        f"Apache Kafka {KAFKA_VERSION}, 3 brokers (same OMB build, same rate)",
        best["kafka"],
        ratio,
        f"ratio <= 1.0 (ours / Kafka's p99) with the rate kept; OMB 1-topic-100-partitions-1kb, kafka-throughput, "
        f"{rate:,.0f} msg/s (half Kafka's max), best of {len(results['kafka'])} runs of {phases.test_s:g} s; "
        + "; ".join(notes),
        met,
        curves,
    )


def _delete_topic(bootstrap: str, topic: str) -> None:
    """Deletes a finished run's topic, so that each run meets a broker holding only its own topic (without it, the
    fourth run's brokers would also hold the three topics before it: 300 idle partition replicas a broker, and on
    raybroker a partition host process for each 16 of them, which the next topic would start anew); a broker
    refusing is a `RuntimeError` naming the topic."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    try:
        admin.delete_topics([topic], operation_timeout=DELETE_TIMEOUT_S)[topic].result(timeout=DELETE_TIMEOUT_S)
    except KafkaException as exc:
        raise RuntimeError(f"deleting OMB's topic {topic} at {bootstrap} failed: {exc}") from exc


def _driver_yaml(ctx: BenchContext, profile: str, side: str, bootstrap: str) -> Path:
    """OMB's driver profile `profile` with `side`'s bootstrap servers, written into the work dir."""
    text = driver_file(profile).read_text()
    if BOOTSTRAP_PLACEHOLDER not in text:
        raise OmbUnavailable(f"{driver_file(profile)} names no {BOOTSTRAP_PLACEHOLDER}")
    path = ctx.workdir / f"omb-{profile}-{side}.yaml"
    path.write_text(text.replace(BOOTSTRAP_PLACEHOLDER, f"bootstrap.servers={bootstrap}"))
    return path
