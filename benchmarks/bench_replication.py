"""Replication benchmark over three Ray nodes on this machine: `acks=all` throughput with three replicas.

| figure        | what                                                          | baseline                            |
|---------------|---------------------------------------------------------------|-------------------------------------|
| `produce_rf3` | records/s, 100-byte values, `Producer(acks="all")`,           | the same `send_many` into a topic   |
|               | `send_many` (1 MB batches, null keys: sticky over the         | with replication factor 1 and       |
|               | partitions) into a topic of 3 partitions with replication     | `acks=1`, on the same cluster in    |
|               | factor 3, every record acknowledged                           | the same run                        |
| `txn_produce_rf3` | records/s, one transactional `Producer` from the head     | the same producer idempotent        |
|               | node, transactions of 1,000 100-byte records over the 3       | (acks=all) into the same topic, one |
|               | partitions of a replication-factor-3 topic (`send_many`,      | wait at the end                     |
|               | `commit_transaction`); `__transaction_state` has 3 replicas   |                                     |

The cluster is `ray.cluster_utils.Cluster`, as `tests/actors/test_zz_replication.py` builds it: a head and two
workers, each with its own log dir and broker (started on the node by a pinned task), Ray's health checks
shortened through the head's `_system_config` (`HEALTH_CHECKS`; Ray's defaults, 3000 ms / 10000 ms / 5 failures,
would take ~15 s to declare a killed node dead). It needs Ray to itself: this module stops the shared
environment's broker and Ray first (so it runs last), and leaves nothing running: after `Cluster.shutdown` any
process of the cluster still alive is killed by its pid. `three_nodes` is the cluster of the other multi-node
modules too (`bench_replication_kafka`, `bench_ray_data_locality`, `bench_failover`).

Both `produce_rf3` sides are measured alternately, best of N each (noise only ever slows a run). Their topics have
3 partitions so that, with the leaders spread over the brokers, each node leads about one of each topic. A
replication-factor-3 run counts only if it starts with all 3 replicas of every partition in sync (it waits up to
`ISR_WAIT_S` for that): with fewer, `acks=all` waits for fewer copies. The goal text lists every ISR change, and
`met` is false if the ISR shrank during a counted run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from benchmarks.common import BenchContext, Figure, throughput_figure, timer
from benchmarks.environment import BENCH_BROKER_PROPERTIES

VALUE_BYTES = 100
PARTITIONS = 3
REPLICATION_FACTOR = 3
# As `produce_1p`: the batch's fixed costs (validation, encoding setup, 5 unacknowledged batches per idempotent
# partition) set the rate, and 1 MB is Kafka's max.message.bytes default.
PRODUCE_BATCH_BYTES = 1_000_000
# A run sends the same `VALUES_PER_CALL` values in several `send_many` calls (the list of a run's 4M records would
# take ~0.5 GB). 4M records are ~6 s for the replication-factor-1 side with every core busy (~650k rec/s),
# ~9 s for the other; a quick run sends 600k.
VALUES_PER_CALL = 200_000
PRODUCE_RECORDS = 4_000_000
QUICK_PRODUCE_RECORDS = 600_000
WARM_UP_RECORDS = 10_000
# How long a replication-factor-3 run waits for followers that left the ISR to come back before it starts (a
# follower rejoins at its first fetch that reaches the high watermark, well under a second when it works).
ISR_WAIT_S = 10.0
PRODUCE_GOAL_RATIO = 0.5
STATE_POLL_S = 0.01
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 128 * 1024 * 1024}
# The tests' settings: a killed node is declared dead after 3 failed checks 300 ms apart (~1-2 s).
HEALTH_CHECKS = {"health_check_period_ms": 300, "health_check_timeout_ms": 300, "health_check_failure_threshold": 3}
# Kafka's replica settings (replica.fetch.wait.max.ms 500, replica.fetch.backoff.ms 1000, replica.lag.time.max.ms
# 30000) are left as they are: the benchmark measures what a user gets.
BROKER_PROPERTIES = dict(BENCH_BROKER_PROPERTIES)
# How long the processes of a shut-down cluster get to exit before they are killed.
EXIT_WAIT_S = 10.0


def run(ctx: BenchContext) -> list[Figure]:
    ctx.progress("  stopping the shared Ray: this module runs its own 3-node cluster")
    stop_shared_ray(ctx)
    with three_nodes(ctx):
        return [_produce_rf3(ctx), _txn_produce_rf3(ctx)]


def stop_shared_ray(ctx: BenchContext) -> None:
    """Stops the run's shared broker and Ray, for a module that runs a cluster of its own."""
    import ray

    ctx.environment.close()
    if ray.is_initialized():
        ray.shutdown()


@dataclass
class ThreeNodes:
    """The cluster, the head's Ray node id, and the worker nodes by Ray node id; every process of the cluster seen
    so far (`seen`, by pid), so that none outlives the module. psutil's `Process` remembers its start time, so a
    pid reused by another program is never waited for or killed."""

    cluster: Any
    head: str
    workers: dict[str, Any]
    seen: dict[int, psutil.Process] = field(default_factory=dict)

    def remember_processes(self) -> None:
        """Adds every process of every node (Ray's daemons and the workers and actors under them)."""
        for node in [self.cluster.head_node, *self.cluster.worker_nodes]:
            if node is None:
                continue
            for _, popen in node.live_processes():
                with contextlib.suppress(psutil.Error):
                    daemon = psutil.Process(popen.pid)
                    for process in [daemon, *daemon.children(recursive=True)]:
                        self.seen.setdefault(process.pid, process)

    def remove(self, node_id: str) -> None:
        """Removes a worker node at once (its raylet and every process on it, no graceful shutdown)."""
        self.remember_processes()
        self.cluster.remove_node(self.workers.pop(node_id), allow_graceful=False)


@contextlib.contextmanager
def three_nodes(ctx: BenchContext, system_config: dict[str, int] | None = None) -> Any:
    """A head and two workers, a broker on each (see the module docstring), shut down and reaped on exit;
    `system_config` adds Ray settings to `HEALTH_CHECKS`."""
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from actors.clients.broker import start_broker, stop_broker
    from cluster.runtime import ensure_ray

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **NODE_ARGS,
            "include_dashboard": False,
            "_system_config": {**HEALTH_CHECKS, **(system_config or {})},
        },
    )
    nodes: ThreeNodes | None = None
    try:
        workers = [cluster.add_node(**NODE_ARGS) for _ in range(2)]
        ensure_ray(cluster.address)
        cluster.wait_for_nodes()
        head = ray.get_runtime_context().get_node_id()
        nodes = ThreeNodes(cluster, head, {worker.node_id: worker for worker in workers})
        ctx.progress(f"  3 Ray nodes up (session {cluster.head_node.get_session_dir_path()})")
        # `start_broker` itself is the task: a function of this module would need `benchmarks` on the workers' path.
        start_here = ray.remote(num_cpus=0)(start_broker)
        root = ctx.scratch("replication")
        for index, node in enumerate([head, *sorted(nodes.workers)]):
            log_dir = root / f"node{index}"
            log_dir.mkdir()
            pinned = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
            properties = {**BROKER_PROPERTIES, "log.dirs": str(log_dir)}
            started = ray.get(start_here.options(scheduling_strategy=pinned).remote(properties))
            if started != node:
                raise RuntimeError(f"the broker meant for node {node} started on {started}")
        ctx.progress("  a broker on each node")
        yield nodes
        try:
            stop_broker()
        except Exception as exc:
            ctx.progress(f"  stopping the brokers failed: {type(exc).__name__}: {exc}")
    finally:
        if nodes is not None:
            nodes.remember_processes()
        ray.shutdown()
        cluster.shutdown()
        if nodes is not None:
            _reap(ctx, [process for pid, process in nodes.seen.items() if pid != os.getpid()])


def _reap(ctx: BenchContext, processes: list[psutil.Process]) -> None:
    """Waits for the cluster's processes to exit, then kills (by pid) those still running."""
    _, alive = psutil.wait_procs(processes, timeout=EXIT_WAIT_S)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            ctx.progress(f"  killing {process.pid} ({process.name()}), still running after the cluster's shutdown")
            process.kill()
    psutil.wait_procs(alive, timeout=EXIT_WAIT_S)


def _values(count: int) -> list[bytes]:
    block = os.urandom(count * VALUE_BYTES)
    return [block[i * VALUE_BYTES : (i + 1) * VALUE_BYTES] for i in range(count)]


def _new_topic(what: str, replication_factor: int) -> str:
    from actors.clients.admin import Admin

    name = f"bench-{what}-{uuid.uuid4().hex[:8]}"
    Admin().create_topic(name, PARTITIONS, replication_factor=replication_factor)
    return name


def states(topic: str) -> dict[int, Any]:
    from actors.clients.broker import Broker

    metadata = Broker.connect().topic(topic)
    return {partition: metadata.state(partition) for partition in metadata.partitions}


def leader_offsets(topic: str) -> list[tuple[int, int, int]]:
    """(log start, high watermark, log end) of each partition's leader."""
    from actors.calls import call
    from actors.server.partition_lookup import replica_actor

    return [
        call(replica_actor(topic, partition, state.leader).offsets.remote())
        for partition, state in sorted(states(topic).items())
    ]


# --- produce_rf3 ------------------------------------------------------------------------------------------


def _produce_rf3(ctx: BenchContext) -> Figure:
    from actors.clients.producer import Producer

    count = QUICK_PRODUCE_RECORDS if ctx.quick else PRODUCE_RECORDS
    repeats = 2
    values = _values(VALUES_PER_CALL)
    replicated = _new_topic("rf3", REPLICATION_FACTOR)
    single = _new_topic("rf1", 1)
    leaders = {topic: sorted(state.leader[:6] for state in states(topic).values()) for topic in (replicated, single)}
    ctx.progress(f"  leaders (node id prefixes): rf3 {leaders[replicated]}, rf1 {leaders[single]}")
    all_acks = Producer(batch_size=PRODUCE_BATCH_BYTES, acks="all")
    leader_acks = Producer(batch_size=PRODUCE_BATCH_BYTES, acks=1)

    def measure(producer: Producer, topic: str) -> Callable[[], float]:
        def once() -> float:
            with timer() as elapsed:
                futures = [producer.send_many(topic, values) for _ in range(count // VALUES_PER_CALL)]
                for future in futures:
                    future.wait()
            return count / elapsed()

        return once

    ours, baseline = measure(all_acks, replicated), measure(leader_acks, single)
    counted: list[float] = []
    best_baseline = 0.0
    isr = IsrRuns()
    try:
        # The partitions' handles looked up, the followers fetching: not part of the measurement.
        all_acks.send_many(replicated, values[:WARM_UP_RECORDS]).wait()
        leader_acks.send_many(single, values[:WARM_UP_RECORDS]).wait()
        for attempt in range(repeats):
            best_baseline = max(best_baseline, baseline())
            before = full_isr(replicated)
            rate = ours()
            after = states(replicated)
            counts, note = isr.observe(
                f"run {attempt + 1}",
                [len(before[p].isr) for p in sorted(before)],
                [len(after[p].isr) for p in sorted(after)],
                any(after[p].isr != before[p].isr for p in after),
            )
            if counts:
                counted.append(rate)
            ctx.progress(f"  produce_rf3 {attempt + 1}/{repeats}: rf3 acks=all {rate:,.0f} rec/s, {note}")
    finally:
        all_acks.close()
        leader_acks.close()
    expected = WARM_UP_RECORDS + count * repeats
    for topic in (replicated, single):
        offsets = leader_offsets(topic)
        if sum(end for _, _, end in offsets) != expected or any(hw != end for _, hw, end in offsets):
            raise RuntimeError(f"{topic}: (log start, high watermark, log end) {offsets}, {expected} records sent")
    if not counted:
        raise RuntimeError(f"no produce_rf3 run started with every replica in sync: {isr.notes}")
    figure = throughput_figure(
        "produce_rf3",
        max(counted),
        "rec/s",
        "replication factor 1, acks=1",
        best_baseline,
        PRODUCE_GOAL_RATIO,
        f"ratio >= {PRODUCE_GOAL_RATIO} with the ISR whole; both Producer.send_many "
        f"({PRODUCE_BATCH_BYTES // 1_000_000} MB batches, {VALUE_BYTES}-byte values) into {PARTITIONS} partitions "
        f"on 3 Ray nodes of this machine, {count:,} records a run, best of {len(counted)} of {repeats} runs; "
        + isr.summary("ISR of 3 throughout"),
    )
    return isr.verdict(figure)


@dataclass
class IsrRuns:
    """What happened to the ISR in each measured replication-factor-3 run: a shrunk ISR makes `acks=all` wait for
    fewer replicas. A judged run (raybroker's) counts only if it started with every replica in sync, and one whose
    ISR changed while it ran leaves the figure unmet (`verdict`); `notes` name every run whose ISR was not whole
    throughout, for the goal text (`summary`). `produce_rf3` and `bench_replication_kafka` judge their runs so."""

    notes: list[str] = field(default_factory=list)
    shrank: bool = False

    def observe(
        self, label: str, before: list[int], after: list[int], changed: bool, *, judged: bool = True
    ) -> tuple[bool, str]:
        """Notes one run (`before`, `after`: its partitions' ISR sizes; `changed`: some ISR differs after it);
        returns whether the run counts, and its note."""
        whole = all(size == REPLICATION_FACTOR for size in before)
        note = f"{label}: ISR {before} -> {after}"
        counts = whole or not judged
        if not counts:
            note += " (not counted: it started without every replica in sync)"
        elif judged:
            self.shrank = self.shrank or changed
        if changed or not whole:
            self.notes.append(note)
        return counts, note

    def summary(self, whole: str) -> str:
        """The notes for the goal text; `whole` when the ISR stayed whole in every run."""
        return "; ".join(self.notes) if self.notes else whole

    def verdict(self, figure: Figure) -> Figure:
        """`figure`, unmet if a counted run's ISR shrank: `acks=all` then stopped waiting for the replicas that
        left, which made the run fast."""
        return dataclasses.replace(figure, met=bool(figure.met) and not self.shrank)


# --- txn_produce_rf3 --------------------------------------------------------------------------------------

TRANSACTION_RECORDS = 1_000
TRANSACTIONS = 300
QUICK_TRANSACTIONS = 50
# Kafka's own transactional / idempotent ratio with one client is ~0.17 (`txn_vs_idempotent`): a report, no goal.
TXN_REPEATS = 2


def _txn_produce_rf3(ctx: BenchContext) -> Figure:
    """Transactions into a replication-factor-3 topic: each commit writes PrepareCommit and CompleteCommit to
    `__transaction_state` and a marker to each of the 3 partitions, all acks=all, from whichever node the
    coordinator runs on, beside the same records sent idempotent."""
    from actors.clients.producer import Producer

    transactions = QUICK_TRANSACTIONS if ctx.quick else TRANSACTIONS
    count = transactions * TRANSACTION_RECORDS
    values = _values(TRANSACTION_RECORDS)
    topic = _new_topic("txn-rf3", REPLICATION_FACTOR)
    transactional = Producer(
        batch_size=PRODUCE_BATCH_BYTES, acks="all", transactional_id=f"bench-txn-rf3-{uuid.uuid4().hex[:8]}"
    )
    idempotent = Producer(batch_size=PRODUCE_BATCH_BYTES, acks="all")
    # Each transaction writes to every partition, so each commit writes one marker to each.
    shares = [values[partition::PARTITIONS] for partition in range(PARTITIONS)]

    def send(producer: Producer) -> list[Any]:
        return [producer.send_many(topic, share, partition=partition) for partition, share in enumerate(shares)]

    best, best_baseline = 0.0, 0.0
    try:
        transactional.init_transactions()
        transactional.begin_transaction()
        send(transactional)
        transactional.commit_transaction()
        for future in send(idempotent):
            future.wait()
        for attempt in range(TXN_REPEATS):
            full_isr(topic)
            with timer() as elapsed:
                for _ in range(transactions):
                    transactional.begin_transaction()
                    send(transactional)
                    transactional.commit_transaction()
            rate = count / elapsed()
            with timer() as elapsed:
                futures = [future for _ in range(transactions) for future in send(idempotent)]
                for future in futures:
                    future.wait()
            baseline = count / elapsed()
            best, best_baseline = max(best, rate), max(best_baseline, baseline)
            ctx.progress(
                f"  txn_produce_rf3 {attempt + 1}/{TXN_REPEATS}: transactional {rate:,.0f}, idempotent "
                f"{baseline:,.0f} rec/s"
            )
    finally:
        transactional.close()
        idempotent.close()
    expected = TRANSACTION_RECORDS * 2 + count * 2 * TXN_REPEATS
    offsets = leader_offsets(topic)
    # Every partition has one COMMIT marker per transaction, the warm-up's included.
    records = sum(end for _, _, end in offsets) - (1 + transactions * TXN_REPEATS) * PARTITIONS
    if records != expected:
        raise RuntimeError(f"{topic}: (log start, high watermark, log end) {offsets}, {expected} records sent")
    return throughput_figure(
        "txn_produce_rf3",
        best,
        "rec/s",
        "raybroker, the same Producer idempotent (acks=all)",
        best_baseline,
        None,
        f"report: transactions of {TRANSACTION_RECORDS:,} {VALUE_BYTES}-byte records over {PARTITIONS} partitions "
        f"with replication factor {REPLICATION_FACTOR} on 3 Ray nodes of this machine, `__transaction_state` "
        f"replicated too, {transactions} transactions a run, best of {TXN_REPEATS}",
    )


def full_isr(topic: str) -> dict[int, Any]:
    """The partitions' states once every replica is in sync again, or as they are after `ISR_WAIT_S`."""
    deadline = time.monotonic() + ISR_WAIT_S
    while True:
        now = states(topic)
        if all(len(state.isr) == REPLICATION_FACTOR for state in now.values()) or time.monotonic() > deadline:
            return now
        time.sleep(STATE_POLL_S)
