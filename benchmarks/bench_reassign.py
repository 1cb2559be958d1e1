"""Moving a partition between brokers beside Apache Kafka's, in the same run: how fast a reassignment copies, and what
a throttled one costs the producers of other partitions.

| figure                 | what (raybroker)                                   | baseline (same run)                   |
|------------------------|----------------------------------------------------|---------------------------------------|
| `reassign_mb_s`        | MB/s of a partition of `SIZE_BYTES` (1 GiB; 64 MiB | Apache Kafka 3.9.1, 3 brokers (KRaft, |
|                        | with `--quick`), replication factor 1, moved to    | `benchmarks.kafka_cluster`): the same |
|                        | another broker with no throttle (step 1 below)     | partition moved the same way          |
| `reassign_produce_p99` | p99 acknowledgement latency (ms) of a librdkafka   | the same producer on the same         |
|                        | producer while that partition moves back under     | raybroker with no move (Kafka's two   |
|                        | `--throttle THROTTLE_B_S` (step 2 below)           | p99s are in the goal text)            |

Both sides get the same client, tool and sequence, each on a cluster of three brokers on this machine: Kafka first
(stopped before Ray starts, so neither shares the cores with the other), then raybroker's
`benchmarks.bench_replication.three_nodes` with a Kafka listener on each node (`node.id` 0-2, as
`produce_rf3_kafka`), its actors at the clients' niceness (`WORKER_NICENESS`).

1. A topic of one partition (replication factor 1) is filled with `SIZE_BYTES` of incompressible 16 KiB values
   (acks=1, 1 MB batches) and moved to another broker with Kafka's own kafka-reassign-partitions.sh (`--execute`, no
   throttle); the clock starts when the tool returns (its JVM's start is not counted) and stops when the brokers'
   metadata lists the target alone as the partition's replica (polled every `POLL_S`). `--verify` follows.
2. The producer (acks=all, idempotent, `TRAFFIC_RPS` records/s of 1 KiB into 3 partitions x 3 replicas) runs
   `TRAFFIC_WARM_UP_S` uncounted, then `TRAFFIC_S` with no move (its baseline), then again while the partition moves
   back to its first broker under `--throttle THROTTLE_B_S` (the move is checked to be still under way when the
   producer stops, then cancelled with `--cancel`, which also clears the throttles). A replication quota lets its
   first window (about ten seconds' worth at the rate) through at once, on both sides, so the producer sees the
   move's first burst too.

`reassign_mb_s` is met at a ratio >= `GOAL_RATIO`; `reassign_produce_p99` when the producer's p99 during the move is
at most `P99_GOAL_RATIO` times its p99 without one. A full run took 192 s (most of it filling 1 GiB on each side and
the JVMs' and Ray's start), `--quick` 105 s. Like `benchmarks.bench_replication` this module needs Ray to itself (it
stops the shared environment first, so it runs last) and leaves nothing running.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_replication import stop_shared_ray, three_nodes
from benchmarks.bench_replication_kafka import WORKER_NICENESS, start_listeners
from benchmarks.common import BenchContext, Figure, percentile, throughput_figure
from benchmarks.kafka_broker import KAFKA_VERSION, kafka_jars, kafka_tools_jar
from benchmarks.kafka_cluster import KafkaCluster
from benchmarks.processes import CLIENT_TIMEOUT_S, QUIET

SIZE_BYTES = 1 << 30
QUICK_SIZE_BYTES = 64 << 20
VALUE_BYTES = 16_384
FILL_SETTINGS = {
    "acks": "1",
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "none",
}
# The producer whose latency `reassign_produce_p99` is: Kafka's Java producer defaults (acks=all, idempotence on).
TRAFFIC_SETTINGS = {"acks": "all", "enable.idempotence": True}
TRAFFIC_PARTITIONS = 3
TRAFFIC_REPLICAS = 3
TRAFFIC_VALUE_BYTES = 1024
TRAFFIC_RPS = 500
TRAFFIC_S = 20.0
QUICK_TRAFFIC_S = 8.0
TRAFFIC_WARM_UP = 100
# An uncounted run first: the JVMs' JIT and the brokers' first appends to the traffic topic.
TRAFFIC_WARM_UP_S = 5.0
# The throttle of the move `reassign_produce_p99` runs beside: it must outlast the producer's run (its first ~10 s
# worth passes at once).
THROTTLE_B_S = 10_000_000
QUICK_THROTTLE_B_S = 2_000_000
POLL_S = 0.05
MOVE_TIMEOUT_S = 900.0
TOOL_TIMEOUT_S = 300.0
REASSIGN_TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LOG_DIRS_TOOL = "org.apache.kafka.tools.LogDirsCommand"
GOAL_RATIO = 1.0
P99_GOAL_RATIO = 2.0


@dataclass(frozen=True, slots=True)
class SideResult:
    """One broker's numbers: the unthrottled move's MB/s, the producer's p99 without and during the throttled move,
    and how far that move got while the producer ran."""

    move_mb_s: float
    p99_ms: float
    p99_moving_ms: float
    throttled_mb_s: float


def run(ctx: BenchContext) -> list[Figure]:
    ctx.progress("  stopping the shared Ray: this module runs its own 3-node cluster")
    stop_shared_ray(ctx)
    size = QUICK_SIZE_BYTES if ctx.quick else SIZE_BYTES
    ctx.progress("  starting Apache Kafka with three brokers (fetched from Maven Central on the first run) ...")
    with KafkaCluster() as kafka:
        theirs = _measure(ctx, "kafka", kafka.bootstrap_servers, size)
    with three_nodes(ctx, WORKER_NICENESS) as nodes:
        bootstrap = start_listeners(nodes)
        ctx.progress(f"  a Kafka listener on each node: {bootstrap}")
        ours = _measure(ctx, "raybroker", bootstrap, size)
    return [_move_figure(ours, theirs, size), _p99_figure(ctx, ours, theirs)]


def _measure(ctx: BenchContext, name: str, bootstrap: str, size: int) -> SideResult:
    """Steps 1 and 2 of the module docstring on one broker."""
    folder = ctx.scratch(f"reassign-{name}")
    moved = f"bench-moved-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, moved, 1, 1)
    ctx.progress(f"  {name}: filling {moved} with {size / 2**20:,.0f} MiB ...")
    _fill(bootstrap, moved, size)
    (source,) = _replicas(bootstrap, moved)
    target = next(broker for broker in _brokers(bootstrap) if broker != source)
    started = _start_move(bootstrap, moved, target, folder, None)
    _wait_for_replicas(bootstrap, moved, (target,))
    move_s = time.monotonic() - started
    _tool(bootstrap, "--verify", "--reassignment-json-file", str(folder / "plan.json"))
    move_mb_s = size / 1e6 / move_s
    ctx.progress(f"  {name}: moved broker {source} -> {target} in {move_s:.1f} s ({move_mb_s:,.1f} MB/s)")

    traffic = f"bench-traffic-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, traffic, TRAFFIC_PARTITIONS, TRAFFIC_REPLICAS)
    seconds = QUICK_TRAFFIC_S if ctx.quick else TRAFFIC_S
    throttle = QUICK_THROTTLE_B_S if ctx.quick else THROTTLE_B_S
    _latencies_ms(bootstrap, traffic, TRAFFIC_WARM_UP_S)
    p99_ms = _p99(_latencies_ms(bootstrap, traffic, seconds))
    ctx.progress(f"  {name}: producer p99 {p99_ms:.1f} ms with no move")
    started = _start_move(bootstrap, moved, source, folder, throttle)
    latencies = _latencies_ms(bootstrap, traffic, seconds)
    copied_s = time.monotonic() - started
    if _replicas(bootstrap, moved) == (source,):
        raise RuntimeError(f"{name}: the throttled move ended before the producer's run did ({copied_s:.1f} s)")
    copied = _copied_bytes(bootstrap, moved, source)
    cancelled = _tool(bootstrap, "--cancel", "--reassignment-json-file", str(folder / "plan.json"))
    if "Successfully cancelled" not in cancelled:
        raise RuntimeError(f"{name}: --cancel did not cancel the move: {cancelled}")
    p99_moving_ms = _p99(latencies)
    throttled_mb_s = copied / 1e6 / copied_s
    ctx.progress(
        f"  {name}: producer p99 {p99_moving_ms:.1f} ms during the throttled move "
        f"({throttled_mb_s:,.1f} MB/s copied under a {throttle / 1e6:g} MB/s throttle)"
    )
    return SideResult(move_mb_s, p99_ms, p99_moving_ms, throttled_mb_s)


def _tool(bootstrap: str, *arguments: str, tool: str = REASSIGN_TOOL) -> str:
    """Kafka's `tool` (kafka-reassign-partitions.sh by default) against `bootstrap`: what it printed;
    `RuntimeError` when it failed."""
    classpath = os.pathsep.join(str(jar) for jar in [*kafka_jars(KAFKA_VERSION), kafka_tools_jar(KAFKA_VERSION)])
    ran = subprocess.run(
        ["java", "-cp", classpath, tool, "--bootstrap-server", bootstrap, *arguments],
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
        check=False,
    )
    if ran.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(arguments)}: {ran.stdout} {ran.stderr}")
    return ran.stdout


def _start_move(bootstrap: str, topic: str, target: int, folder: Path, throttle: int | None) -> float:
    """Starts the move of `topic`'s partition 0 to broker `target` (with `throttle` B/s if given); the monotonic time
    the tool returned at."""
    plan = folder / "plan.json"
    moves = [{"topic": topic, "partition": 0, "replicas": [target]}]
    plan.write_text(json.dumps({"version": 1, "partitions": moves}), encoding="utf-8")
    throttled = () if throttle is None else ("--throttle", str(throttle))
    printed = _tool(bootstrap, "--execute", "--reassignment-json-file", str(plan), *throttled)
    if "Successfully started partition reassignment" not in printed:
        raise RuntimeError(f"the move of {topic} did not start: {printed}")
    return time.monotonic()


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **QUIET})


def _create_topic(bootstrap: str, name: str, partitions: int, replicas: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(name, partitions, replicas)], operation_timeout=30)[name].result(timeout=60)
    _wait(lambda: len(_metadata(bootstrap, name)) == partitions, f"{name}'s leaders")


def _metadata(bootstrap: str, topic: str) -> dict[int, Any]:
    """The topic's partitions that have a leader, as the brokers' metadata reports them."""
    found = _admin(bootstrap).list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics.get(topic)
    partitions = {} if found is None or found.error is not None else found.partitions
    return {number: partition for number, partition in partitions.items() if partition.leader >= 0}


def _brokers(bootstrap: str) -> list[int]:
    return sorted(_admin(bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S).brokers)


def _replicas(bootstrap: str, topic: str) -> tuple[int, ...]:
    partition = _metadata(bootstrap, topic).get(0)
    return () if partition is None else tuple(partition.replicas)


def _wait_for_replicas(bootstrap: str, topic: str, replicas: tuple[int, ...]) -> None:
    _wait(lambda: _replicas(bootstrap, topic) == replicas, f"{topic} on {replicas} alone", MOVE_TIMEOUT_S)


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = CLIENT_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} after {timeout_s:.0f} s")
        time.sleep(POLL_S)


def _copied_bytes(bootstrap: str, topic: str, broker: int) -> int:
    """The bytes of `topic`'s partition 0 on `broker`, as kafka-log-dirs.sh reports them (DescribeLogDirs)."""
    printed = _tool(bootstrap, "--describe", "--broker-list", str(broker), "--topic-list", topic, tool=LOG_DIRS_TOOL)
    described = json.loads(printed.strip().splitlines()[-1])
    return sum(
        replica["size"]
        for found in described["brokers"]
        for log_dir in found["logDirs"]
        for replica in log_dir["partitions"]
        if replica["partition"] == f"{topic}-0"
    )


def _fill(bootstrap: str, topic: str, size: int) -> None:
    """`size` bytes of incompressible values into partition 0 of `topic`, every one acknowledged."""
    from confluent_kafka import Producer

    block = os.urandom(2 * VALUE_BYTES)
    producer = Producer({"bootstrap.servers": bootstrap, **FILL_SETTINGS, **QUIET})
    failures: list[str] = []

    def report(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    for index in range(size // VALUE_BYTES):
        offset = index % VALUE_BYTES
        while True:
            try:
                producer.produce(topic, block[offset : offset + VALUE_BYTES], partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(CLIENT_TIMEOUT_S) or failures:
        raise RuntimeError(f"filling {topic}: {len(failures)} records failed ({failures[:1]}), or some unacknowledged")


def _latencies_ms(bootstrap: str, topic: str, seconds: float) -> list[float]:
    """`TRAFFIC_RPS` records a second for `seconds` (`TRAFFIC_SETTINGS`, any partition): each one's time from
    `produce` to its acknowledgement, after `TRAFFIC_WARM_UP` uncounted ones."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **TRAFFIC_SETTINGS, **QUIET})
    value = os.urandom(TRAFFIC_VALUE_BYTES)
    latencies: list[float] = []
    failures: list[str] = []

    def send(counted: bool) -> None:
        sent = time.monotonic()

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failures.append(str(error))
            elif counted:
                latencies.append((time.monotonic() - sent) * 1000)

        producer.produce(topic, value, on_delivery=delivered)

    for _ in range(TRAFFIC_WARM_UP):
        send(False)
    producer.flush(CLIENT_TIMEOUT_S)
    start = time.monotonic()
    sent = 0
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * TRAFFIC_RPS) + 1
        while sent < due:
            send(True)
            sent += 1
        producer.poll(1 / TRAFFIC_RPS)
    if producer.flush(CLIENT_TIMEOUT_S) or failures:
        raise RuntimeError(f"{topic}: {len(failures)} records failed ({failures[:1]}), or some unacknowledged")
    return latencies


def _p99(latencies: list[float]) -> float:
    return percentile(sorted(latencies), 0.99)


def _move_figure(ours: SideResult, theirs: SideResult, size: int) -> Figure:
    return throughput_figure(
        "reassign_mb_s",
        ours.move_mb_s,
        "MB/s",
        f"Apache Kafka {KAFKA_VERSION}, 3 brokers (same tool)",
        theirs.move_mb_s,
        GOAL_RATIO,
        f"ratio >= {GOAL_RATIO:g}; a {size / 2**20:,.0f} MiB partition (replication factor 1) moved to another broker "
        "by kafka-reassign-partitions.sh with no throttle, from --execute's return to the metadata naming the new "
        "replica alone",
    )


def _p99_figure(ctx: BenchContext, ours: SideResult, theirs: SideResult) -> Figure:
    ratio = ours.p99_moving_ms / ours.p99_ms
    throttle = QUICK_THROTTLE_B_S if ctx.quick else THROTTLE_B_S
    seconds = QUICK_TRAFFIC_S if ctx.quick else TRAFFIC_S
    return Figure(
        "reassign_produce_p99",
        ours.p99_moving_ms,
        "ms",
        "the same producer with no move (raybroker)",
        ours.p99_ms,
        ratio,
        f"ratio (p99 during the move / without) <= {P99_GOAL_RATIO:g}; librdkafka acks=all, idempotent, "
        f"{TRAFFIC_RPS} records/s of {TRAFFIC_VALUE_BYTES} B into {TRAFFIC_PARTITIONS} partitions x "
        f"{TRAFFIC_REPLICAS} replicas for {seconds:g} s while a partition moves under --throttle {throttle:,} B/s "
        f"(raybroker copied {ours.throttled_mb_s:,.1f} MB/s meanwhile); Apache Kafka {KAFKA_VERSION} in the same run: "
        f"p99 {theirs.p99_moving_ms:.1f} ms during its move vs {theirs.p99_ms:.1f} ms without "
        f"(ratio {theirs.p99_moving_ms / theirs.p99_ms:.2f}, {theirs.throttled_mb_s:,.1f} MB/s copied)",
        ratio <= P99_GOAL_RATIO,
    )
