"""The Ray head lost beside Apache Kafka's active controller lost, in the same run: how long acks=all writes to a
partition that the lost machine does not lead go without an acknowledgement.

| figure              | what (raybroker)                                     | baseline (same run)                     |
|---------------------|------------------------------------------------------|-----------------------------------------|
| `head_loss_stall_s` | the longest gap between acknowledgements of acks=all | Apache Kafka 3.9.1, 3 combined broker + |
|                     | writes to a partition a worker leads (3 replicas,    | controller nodes (`benchmarks.          |
|                     | one on the head), from SIGKILL of every process of   | kafka_cluster`): SIGKILL of the active  |
|                     | the head node until writes flow again; the head is   | KRaft controller's JVM (a broker with a |
|                     | started again at once with `raybroker start`         | replica of the partition), started      |
|                     |                                                      | again at once                           |

raybroker: three `ray start` nodes of this machine (`benchmarks.lost_head`): the head started by `raybroker start`
(its GCS state in RocksDB; the controller, the metadata log and broker `node.id` 0 on it) and two workers, each
with a broker (`node.id` 1 and 2) and a Kafka listener. Kafka: `benchmarks.kafka_cluster`'s three nodes, each a
broker and a KRaft voter. On both a topic of 3 partitions with 3 replicas and `min.insync.replicas` 2 is created
and waited for until every replica is in sync; the partition written is led by a broker the fault leaves running
(a worker's; one not the active controller), so the stall is that of its acks=all writes waiting for the lost
replica, which only a controller takes out of the ISR. The client is `benchmarks.bench_failover`'s producer
(librdkafka, acks=all, idempotent, one record every 10 ms, each acknowledgement timestamped), bootstrapped from the
brokers the fault leaves running.

After `WARM_ACKS` acknowledgements every process of the lost machine gets SIGKILL (raybroker: the head's GCS,
raylet, daemons and everything its raylet started, as `tests/cluster/test_head_restart.py` loses it; Kafka: the
controller's JVM), and the machine is started again at once on its disk, as a restarted pod or instance comes back
(`raybroker start` with the same log dir and GCS storage, which resumes the cluster; Kafka's node with its folder).
Once it is back and `TAIL_ACKS` more writes were acknowledged, the figure is the longest gap between consecutive
acknowledgements from the fault on (the fault itself counting as the first). The partition is then read back from
its leader: the figure is met only if every acknowledged record is there exactly once, on both sides. Both sides
fence a broker after 9 s without a heartbeat (Kafka's default): Kafka's controllers elect a new active one among
themselves and take the lost broker out of the ISR once fenced; raybroker's controller lives on the head, so the
writes wait for the head's return and its controller's first pass.

Kafka runs first, stopped before the Ray cluster starts. One loss a side, `--quick` too (~4 minutes). Like
`benchmarks.bench_failover`, the module stops the shared Ray first (it runs among the last) and leaves nothing
running.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.bench_failover import (
    FLUSH_TIMEOUT_S,
    MIN_INSYNC_REPLICAS,
    PARTITIONS,
    SEND_PAUSE_S,
    Writer,
    create_topic,
    isr_whole,
    kafka_controller,
    leaders,
    partition_metadata,
    read_back,
    wait_for,
)
from benchmarks.bench_replication import stop_shared_ray
from benchmarks.common import BenchContext, Figure
from benchmarks.kafka_broker import KAFKA_VERSION, free_ports
from benchmarks.kafka_cluster import KafkaCluster
from benchmarks.lost_head import (
    WORKER_BROKER,
    cli_environment,
    head_port_taken,
    head_processes,
    kill_all,
    ray_environment,
    session_processes,
    started_head,
    worker_node_command,
)
from benchmarks.processes import CLIENT_TIMEOUT_S
from benchmarks.run_info import REPO_ROOT
from cluster.runtime import RAY_HEAD_PORT

WARM_ACKS = 50
TAIL_ACKS = 100
WORKERS = 2
COMMAND_TIMEOUT_S = 240.0
ACKS_TIMEOUT_S = 180.0
GOAL_RATIO = 1.0
GOAL_S = 10.0
RAYBROKER = str(Path(sys.executable).parent / "raybroker")


@dataclass(frozen=True, slots=True)
class Stall:
    """One loss measured: the longest gap between acknowledgements from the fault on, whether every acknowledged
    write was read back once, and what the figure's text says of it."""

    seconds: float
    intact: bool
    text: str


def run(ctx: BenchContext) -> list[Figure]:
    ctx.progress("  stopping the shared Ray: this module runs its own 3-node cluster")
    stop_shared_ray(ctx)
    ctx.progress("  starting Apache Kafka with three brokers (fetched from Maven Central on the first run) ...")
    kafka = _kafka_stall(ctx)
    ours = _raybroker_stall(ctx)
    ratio = ours.seconds / kafka.seconds
    met = ratio <= GOAL_RATIO and ours.seconds <= GOAL_S and ours.intact and kafka.intact
    return [
        Figure(
            "head_loss_stall_s",
            ours.seconds,
            "s",
            f"Apache Kafka {KAFKA_VERSION}, 3 brokers, the active KRaft controller SIGKILLed and started again "
            "(same client)",
            kafka.seconds,
            ratio,
            f"ratio (ours/Kafka's) <= {GOAL_RATIO:g}, <= {GOAL_S:g} s and no acknowledged write lost; raybroker "
            f"{ours.seconds:.2f} s: {ours.text}; Kafka {kafka.seconds:.2f} s: {kafka.text}; both: librdkafka "
            f"acks=all, idempotent, one record every {SEND_PAUSE_S * 1000:g} ms into a partition of 3 replicas "
            f"(min.insync.replicas {MIN_INSYNC_REPLICAS}), one on the lost machine, led by another",
            met,
        )
    ]


def _stall(
    ctx: BenchContext,
    side: str,
    bootstrap: str,
    topic: str,
    partition: int,
    lose: Callable[[], None],
    restart: Callable[[], None],
    where: str,
) -> Stall:
    """One loss (see the module docstring): the writer started, the machine lost by `lose` and started again by
    `restart` (which returns once it is back), the acknowledged writes read back."""
    writer = Writer(bootstrap, topic, partition)
    thread = threading.Thread(target=writer.run, name=f"head-loss-writer-{side}", daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(writer.acked) >= WARM_ACKS or writer.error, ACKS_TIMEOUT_S, "the first writes")
        if writer.error is not None:
            raise RuntimeError(f"the {side} writer failed before the fault: {writer.error!r}")
        faulted_at = time.monotonic()
        lose()
        lost_s = time.monotonic() - faulted_at
        restart()
        back_s = time.monotonic() - faulted_at
        count = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= count + TAIL_ACKS or writer.error, ACKS_TIMEOUT_S, "later writes")
    finally:
        writer.stopped.set()
        thread.join(FLUSH_TIMEOUT_S + CLIENT_TIMEOUT_S)
    if writer.error is not None or thread.is_alive():
        raise RuntimeError(f"the {side} writer failed or hangs: {writer.error!r}")
    times = [faulted_at, *(at for at, _, _ in writer.acked if at > faulted_at)]
    gaps = [(later - earlier, earlier) for earlier, later in itertools.pairwise(times)]
    seconds, gap_start = max(gaps)
    records = read_back(bootstrap, topic, partition)
    found: dict[int, int] = {}
    for _, sequence, _ in records:
        found[sequence] = found.get(sequence, 0) + 1
    lost = [sequence for _, sequence, _ in writer.acked if sequence not in found]
    duplicated = [sequence for sequence, count in found.items() if count > 1]
    intact = not (lost or duplicated or writer.unanswered or writer.failed)
    parts = [
        where,
        f"the machine's processes gone {lost_s:.2f} s after the fault, back {back_s:.1f} s after it",
        f"longest gap from {gap_start - faulted_at:.2f} s to {gap_start - faulted_at + seconds:.2f} s",
        f"{len(writer.failed)} send(s) failed" if writer.failed else "no send failed",
        f"all {len(writer.acked)} acknowledged writes read back once"
        if intact
        else f"{len(writer.acked)} acknowledged: LOST {lost[:5]}, DUPLICATED {duplicated[:5]}, "
        f"{writer.unanswered} unanswered after the flush",
    ]
    text = ", ".join(parts)
    ctx.progress(f"  {side}: {seconds:.2f} s; {text}")
    return Stall(seconds, intact, text)


# --- Apache Kafka -----------------------------------------------------------------------------------------------


def _kafka_stall(ctx: BenchContext) -> Stall:
    """The active controller's node lost and started again, on Kafka's three nodes (stopped afterwards)."""
    with KafkaCluster() as kafka:
        everyone = kafka.bootstrap_servers
        topic = create_topic(everyone, "head-loss", lambda name: isr_whole(everyone, name))
        controller = kafka_controller(kafka)
        node = next(node for node in kafka.nodes if node.node_id == controller)
        others = ",".join(f"127.0.0.1:{other.port}" for other in kafka.nodes if other is not node)

        led = wait_for(lambda: leaders(others, topic), CLIENT_TIMEOUT_S, f"{topic}'s leaders")
        partition = next((p for p, leader in enumerate(led) if leader != controller), None)
        if partition is None:
            raise RuntimeError(f"Kafka's controller {controller} leads every partition of {topic}")
        where = f"broker {led[partition]} led partition {partition}, the lost node {controller} was the controller"
        ctx.progress(f"  Kafka: {topic}, {where}")

        def lose() -> None:
            process = node.process
            if process is None:
                raise RuntimeError(f"Kafka node {controller} is not running")
            process.send_signal(signal.SIGKILL)
            process.wait()

        return _stall(ctx, "Kafka", others, topic, partition, lose, lambda: kafka.restart(node), where)


# --- raybroker --------------------------------------------------------------------------------------------------


class _Cluster:
    """The head and workers of `benchmarks.lost_head` under `root`, driven by `raybroker` and `ray` commands."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = cli_environment(root)
        self.nodes: set[str] = set()
        self.head_port, *self.worker_ports = free_ports(1 + WORKERS)
        self.address = ""
        self.daemons: list[psutil.Process] = []

    def _run(self, command: list[str], env: dict[str, str], what: str) -> str:
        ran = subprocess.run(
            command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
        if ran.returncode != 0:
            raise RuntimeError(f"{what} failed: {(ran.stderr or ran.stdout)[-2000:]}")
        return ran.stdout

    def start_head(self, what: str) -> str:
        """`raybroker start` of the head; its output."""
        listener = f"listeners=PLAINTEXT://127.0.0.1:{self.head_port}"
        command = [RAYBROKER, "start", "--log-dirs", str(self.root / "head"), "--override", listener]
        started = self._run(command, self.env, what)
        self.address, node = started_head(started)
        self.nodes.add(node)
        return started

    def start_workers(self) -> str:
        """Both worker nodes, each with its broker and listener; the listeners' bootstrap servers."""
        ray_env = ray_environment(self.env)
        broker_env = {**ray_env, "PYTHONPATH": str(REPO_ROOT)}
        bootstraps = []
        for index, port in enumerate(self.worker_ports, start=1):
            self._run([*worker_node_command(self.address), "--disable-usage-stats"], ray_env, f"worker node {index}")
            script = [sys.executable, "-c", WORKER_BROKER, self.address, str(self.root / f"worker{index}"), str(port)]
            printed = self._run([*script, str(index), "--", *self.nodes], broker_env, f"worker broker {index}")
            node, bootstrap = printed.split()[-2:]
            self.nodes.add(node)
            bootstraps.append(bootstrap)
        return ",".join(bootstraps)

    def lose_head(self) -> None:
        lost = head_processes(self.daemons)
        if not any(proc.name() == "gcs_server" for proc in lost):
            raise RuntimeError("the head's gcs_server is not among its processes")
        kill_all(lost)

    def restart_head(self) -> None:
        # A new head machine has no record of the cluster a worker's raylet points at (see test_head_restart.py).
        (self.root / "ray" / "ray_current_cluster").unlink(missing_ok=True)
        started = self.start_head("raybroker start after the head's loss")
        if "Resuming the Ray cluster" not in started:
            raise RuntimeError(f"raybroker start did not resume the cluster: {started[-2000:]}")

    def stop(self) -> None:
        """`raybroker stop`, then SIGKILL to whatever of the cluster is left; the folder removed."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run([RAYBROKER, "stop"], env=self.env, capture_output=True, timeout=COMMAND_TIMEOUT_S)
        kill_all(session_processes(self.root, self.nodes))
        shutil.rmtree(self.root, ignore_errors=True)


def _raybroker_stall(ctx: BenchContext) -> Stall:
    """The head lost and started again, on raybroker's three Ray nodes (stopped afterwards)."""
    if head_port_taken():
        raise RuntimeError(f"port {RAY_HEAD_PORT} is taken: `raybroker start` needs it for its head")
    # Short: Ray's unix sockets live under it, and a socket path has at most 107 bytes.
    cluster = _Cluster(Path(tempfile.mkdtemp(prefix="rbh-", dir="/tmp")))
    try:
        ctx.progress("  starting a Ray head with raybroker start, and two worker nodes with a broker each ...")
        cluster.start_head("raybroker start")
        cluster.daemons = session_processes(cluster.root, cluster.nodes)
        bootstrap = cluster.start_workers()
        topic = create_topic(bootstrap, "head-loss", lambda name: isr_whole(bootstrap, name))
        found = [partition_metadata(bootstrap, topic, partition) for partition in range(PARTITIONS)]
        led = [(p, int(state.leader)) for p, state in enumerate(found) if state is not None and state.leader > 0]
        if not led:
            raise RuntimeError(f"the head leads every partition of {topic}: no worker-led partition to write")
        partition, leader = led[0]
        where = f"broker {leader} (a worker) led partition {partition}, the head held the controller and broker 0"
        ctx.progress(f"  raybroker: {topic}, {where}")
        return _stall(ctx, "raybroker", bootstrap, topic, partition, cluster.lose_head, cluster.restart_head, where)
    finally:
        cluster.stop()
