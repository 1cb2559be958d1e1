"""Partitions per node: how many partitions one node hosts within 20 GiB, with partition hosts against one actor
per partition, and how long creating them takes.

Both modes are measured in the same run, each on a broker of its own config (the environment stops the shared
broker cleanly and starts one over a new log dir). One actor per partition (`log.partitions.per.process=1`) is
measured first: a topic of `BASELINE_PARTITIONS` partitions, each its own actor process. Then a broker with
`log.partitions.per.process=HOSTED_PER_PROCESS` creates a topic of `hosted - 1` partitions (with the one
`__consumer_offsets` partition, every host is full; the spare host started ahead holds none and is not counted).

Memory is the USS (pages no other process shares: what a process really adds) of the processes holding the
partitions, found through the log manager's `describe` (each partition's state names its pid) and read with
psutil, summed and divided by the partitions they hold; partitions per 20 GiB is 20 GiB over that. The log
manager, controller and Ray's own daemons are the same in both modes and left out. Creation time is
`create_topic` from call to answer, reported per 1,000 partitions.
"""

from __future__ import annotations

import psutil

from benchmarks.common import BenchContext, Figure, absolute_figure, timer

MIB = 1024 * 1024
NODE_BUDGET_BYTES = 20 * 1024 * MIB
HOSTED_PER_PROCESS = 100
# One actor process per partition starts in ~1 s (3 s under load): 8 keep the baseline within ~25 s.
BASELINE_PARTITIONS = 8
QUICK_BASELINE_PARTITIONS = 4
HOSTED_PARTITIONS = 1000
QUICK_HOSTED_PARTITIONS = 100
CREATE_TIMEOUT_S = 600.0
GOAL_PARTITIONS = 1000


def _measure(ctx: BenchContext, topic: str, count: int) -> tuple[float, float, float, int]:
    """Creates `topic` with `count` partitions on the running broker; returns (seconds to create, USS bytes per
    partition, RSS bytes per partition, processes) over every process holding a partition of this node."""
    import ray

    from actors.calls import call, get_actor
    from actors.clients.broker import Broker
    from actors.options import log_manager_name

    broker = Broker.connect()
    ctx.progress(f"  creating {count} partitions ({topic})")
    with timer() as elapsed:
        call(broker.controller.create_topic.remote(topic, count), timeout_s=CREATE_TIMEOUT_S)
    create_s = elapsed()
    manager = get_actor(log_manager_name(ray.get_runtime_context().get_node_id()))
    held: dict[int, int] = {}
    for _, state in call(manager.describe.remote(), timeout_s=CREATE_TIMEOUT_S):
        if state is not None:
            held[state.pid] = held.get(state.pid, 0) + 1
    pids = {state.pid for _, state in call(manager.describe.remote(topic)) if state is not None}
    partitions = sum(held[pid] for pid in pids)
    uss = rss = 0
    for pid in pids:
        info = psutil.Process(pid).memory_full_info()
        uss += info.uss
        rss += info.rss
    return create_s, uss / partitions, rss / partitions, len(pids)


def run(ctx: BenchContext) -> list[Figure]:
    ctx.progress("  restarting the broker with log.partitions.per.process=1")
    ctx.environment.broker({"log.partitions.per.process": "1"})
    baseline_count = QUICK_BASELINE_PARTITIONS if ctx.quick else BASELINE_PARTITIONS
    hosted_count = QUICK_HOSTED_PARTITIONS if ctx.quick else HOSTED_PARTITIONS
    actor_s, actor_uss, actor_rss, _ = _measure(ctx, "bench-one-actor-each", baseline_count)
    ctx.progress(f"  restarting the broker with log.partitions.per.process={HOSTED_PER_PROCESS}")
    ctx.environment.broker({"log.partitions.per.process": str(HOSTED_PER_PROCESS)})
    # The broker's one __consumer_offsets partition takes the first slot, so every host ends up full.
    hosted_s, hosted_uss, hosted_rss, hosts = _measure(ctx, "bench-hosted", hosted_count - 1)
    per_node = NODE_BUDGET_BYTES / hosted_uss
    baseline_per_node = NODE_BUDGET_BYTES / actor_uss
    hosted_s_per_1000 = hosted_s * 1000 / (hosted_count - 1)
    actor_s_per_1000 = actor_s * 1000 / baseline_count
    memory = (
        f"USS per partition {hosted_uss / MIB:.2f} MiB hosted ({hosted_count} in {hosts} processes of "
        f"{HOSTED_PER_PROCESS}), {actor_uss / MIB:.0f} MiB as own actor (RSS {hosted_rss / MIB:.2f} vs "
        f"{actor_rss / MIB:.0f} MiB)"
    )
    return [
        Figure(
            "partitions_per_node",
            per_node,
            "partitions / 20 GiB",
            "one actor per partition",
            baseline_per_node,
            per_node / baseline_per_node,
            f">= {GOAL_PARTITIONS:,}; {memory}",
            per_node >= GOAL_PARTITIONS,
        ),
        absolute_figure(
            "partitions_create_s",
            hosted_s_per_1000,
            "s / 1,000 partitions",
            f"report only: one actor per partition takes {actor_s_per_1000:,.0f} s per 1,000 "
            f"({actor_s:.1f} s for {baseline_count}); hosted {hosted_s:.1f} s for {hosted_count - 1}",
            None,
        ),
    ]
