"""What the broker's metrics cost on the produce path: the same two workloads with metrics on and off.

| figure                 | what (metrics on)                                 | baseline (same run)                     |
|------------------------|---------------------------------------------------|-----------------------------------------|
| `metrics_produce_send` | records per CPU second of the broker's processes  | the same, with `RAYBROKER_METRICS=off`  |
|                        | in `produce_send`'s workload: `Producer.send` per |                                         |
|                        | record, 100-byte values, keys over 8 partitions   |                                         |
| `metrics_wire_produce` | the same in `wire_produce`'s workload:            | the same, with `RAYBROKER_METRICS=off`  |
|                        | confluent-kafka into one partition, acks=1        |                                         |

Goal of each: ratio (on / off) >= 0.97, metrics costing at most 3 %. The records/s of both modes are in the goal
text.

Why CPU seconds and not records/s: the broker is CPU-bound, so what metrics cost shows as CPU per record, and with
other work running the wall-clock rates of two runs a few seconds apart differed by -14 % to
+5 % either way (best of 6, load 5-40), which hides a 3 % cost; the CPU a run takes moves far less with the load.
The CPU counted is that of the mode's process and every process under it: its Ray's daemons and workers (the
partition processes), the listener and the Python producer, not the confluent-kafka client (the same in both
modes).

Metrics are switched per process by `RAYBROKER_METRICS` (`actors.metrics.ray_export`), which Ray's workers inherit
from the process that starts Ray. So each mode is a spawned process of its own (`_ModeBroker`) holding an embedded
Ray, a broker and a listener for the whole module; both run at once, idle while the other is measured, and the
parent asks them for runs alternately (on, off, off, on, on, off, ...), best of N per mode. The Python producer runs
in the mode's process, the driver of its broker, as in `produce_send`; the confluent-kafka producer in a process of
its own (`benchmarks.processes`), as in `wire_produce`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import uuid
from typing import Any

import psutil

from benchmarks.bench_send import PARTITIONS, send_rate, send_records
from benchmarks.bench_wire import PRODUCE_VALUE_BYTES, create_topic, produce_client
from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.environment import BENCH_BROKER_PROPERTIES
from benchmarks.processes import CLIENT_TIMEOUT_S, in_process

GOAL_RATIO = 0.97
MODES = ("on", "off")
# Ray's start, the broker's and the listener's, in a process of its own, with every core busy.
START_TIMEOUT_S = 300.0


def run(ctx: BenchContext) -> list[Figure]:
    counts = {"produce_send": 50_000 if ctx.quick else 200_000, "wire_produce": 200_000 if ctx.quick else 1_000_000}
    repeats = 2 if ctx.quick else 6
    ctx.progress("  starting a broker with metrics on and one with metrics off, each on an embedded Ray of its own")
    brokers = {mode: _ModeBroker(mode, ctx.scratch(f"metrics-{mode}")) for mode in MODES}
    # Best records per CPU second of the broker's processes, and best records/s, per (workload, mode).
    per_cpu_s = {(workload, mode): 0.0 for workload in counts for mode in MODES}
    rate = dict(per_cpu_s)
    try:
        for broker in brokers.values():
            broker.ready()
        for attempt in range(repeats):
            # Each mode goes first in every other round, so neither always follows the other's runs.
            for mode in MODES if attempt % 2 == 0 else MODES[::-1]:
                for workload, count in counts.items():
                    wall_rate, cpu_s = brokers[mode].measure(workload, count)
                    rate[workload, mode] = max(rate[workload, mode], wall_rate)
                    per_cpu_s[workload, mode] = max(per_cpu_s[workload, mode], count / cpu_s)
            ctx.progress(
                f"  metrics {attempt + 1}/{repeats}: "
                + ", ".join(
                    f"{workload} {per_cpu_s[workload, 'on']:,.0f} on vs {per_cpu_s[workload, 'off']:,.0f} off"
                    for workload in counts
                )
                + " records per CPU second"
            )
    finally:
        for broker in brokers.values():
            broker.stop()
    return [
        throughput_figure(
            f"metrics_{workload}",
            per_cpu_s[workload, "on"],
            "rec/CPU-s",
            "RAYBROKER_METRICS=off",
            per_cpu_s[workload, "off"],
            GOAL_RATIO,
            f"ratio >= {GOAL_RATIO:g}: metrics cost at most {1 - GOAL_RATIO:.0%} "
            f"(records/s {rate[workload, 'on']:,.0f} on, {rate[workload, 'off']:,.0f} off)",
        )
        for workload in counts
    ]


class _ModeBroker:
    """A spawned process with an embedded Ray started under `RAYBROKER_METRICS=<mode>`, a broker over `log_dir`,
    a listener on a free port and a topic for `produce_send`'s workload; it answers `ask` until `stop`."""

    def __init__(self, mode: str, log_dir: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self.mode = mode
        self.bootstrap_servers = ""
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(mode, str(log_dir), child), daemon=True)
        self._process.start()

    def ready(self) -> None:
        self.bootstrap_servers = self._answer(START_TIMEOUT_S)

    def measure(self, workload: str, count: int) -> tuple[float, float]:
        """One run of `workload` with `count` records: (records/s, CPU seconds the broker's processes spent)."""
        before = self._cpu_s()
        if workload == "produce_send":
            self._connection.send(("send", count))
            records_per_s = float(self._answer(CLIENT_TIMEOUT_S))
        else:
            topic = create_topic(self.bootstrap_servers, "metrics")
            records_per_s = in_process(produce_client, self.bootstrap_servers, topic, count, PRODUCE_VALUE_BYTES).rate
        return records_per_s, self._cpu_s() - before

    def _cpu_s(self) -> float:
        """CPU seconds used so far by the mode's process and its descendants: its Ray's daemons and workers (the
        partition processes), the listener and the Python producer; not the confluent-kafka client, a process of
        the parent's."""
        total = 0.0
        root = psutil.Process(self._process.pid)
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system
        return total

    def stop(self) -> None:
        if self._process.is_alive():
            try:
                self._connection.send(("stop", 0))
                self._answer(CLIENT_TIMEOUT_S)
            except (OSError, EOFError, RuntimeError):
                pass
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def _answer(self, timeout_s: float) -> Any:
        if not self._connection.poll(timeout_s):
            raise RuntimeError(f"the metrics-{self.mode} broker did not answer within {timeout_s:.0f} s")
        ok, value = self._connection.recv()
        if not ok:
            raise RuntimeError(f"the metrics-{self.mode} broker failed: {value}")
        return value


def _serve(mode: str, log_dir: str, connection: Any) -> None:
    """The mode's process (see `_ModeBroker`): answers (True, result) or (False, error text) to each request."""
    os.environ["RAYBROKER_METRICS"] = mode
    os.environ.pop("RAY_ADDRESS", None)
    try:
        import ray

        from actors import Admin, Producer
        from actors.clients.broker import start_broker, stop_broker
        from cluster.protocol.listener import KafkaListener
        from cluster.runtime import ensure_ray

        ensure_ray()
        start_broker({**BENCH_BROKER_PROPERTIES, "log.dirs": log_dir})
        topic = f"bench-metrics-{uuid.uuid4().hex[:8]}"
        Admin().create_topic(topic, PARTITIONS)
        producer = Producer()
    except BaseException as exc:
        connection.send((False, f"{type(exc).__name__}: {exc}"))
        return
    try:
        with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": "1"}) as listener:
            connection.send((True, listener.bootstrap_servers))
            while True:
                what, count = connection.recv()
                if what == "stop":
                    break
                try:
                    connection.send((True, _send_rate(producer, topic, count)))
                except Exception as exc:
                    connection.send((False, f"{type(exc).__name__}: {exc}"))
        producer.close()
        stop_broker()
        connection.send((True, None))
    finally:
        ray.shutdown()


def _send_rate(producer: Any, topic: str, count: int) -> float:
    """`produce_send`'s workload (`bench_send.send_rate`) over `count` records."""
    keys, value = send_records(count)
    return send_rate(producer, topic, keys, value)
