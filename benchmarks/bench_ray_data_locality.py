"""Where `read_topic`'s tasks run when a topic's partitions are spread over three Ray nodes.

| figure              | what                                                                       | goal   |
|---------------------|----------------------------------------------------------------------------|--------|
| `ray_data_locality` | share of read tasks that ran on the node of their partition's leader,      | >= 0.9 |
|                     | counted from the blocks' execution stats (`cluster.data.locality`)         |        |

The cluster is `bench_replication`'s (`three_nodes`: a head and two workers of one logical CPU each, a broker on
each node), so this module stops the shared Ray first and runs with the replication benchmark, last. The topic has
`PARTITIONS` partitions, which the controller spreads over the three brokers (fewest first), filled with
`RECORDS_PER_PARTITION` 100-byte records each; the figure is the worst share over `REPEATS` reads. The goal text
gives the tasks and the read's rows/s (each node runs one read task at a time).
"""

from __future__ import annotations

import os
import time

from benchmarks.bench_replication import stop_shared_ray, three_nodes
from benchmarks.common import BenchContext, Figure, absolute_figure, timer

PARTITIONS = 6
RECORDS_PER_PARTITION = 50_000
QUICK_RECORDS_PER_PARTITION = 10_000
VALUE_BYTES = 100
REPEATS = 3
GOAL = 0.9


def run(ctx: BenchContext) -> list[Figure]:
    import ray

    from actors.clients.admin import Admin
    from actors.clients.broker import Broker
    from actors.clients.producer import Producer
    from cluster.data import read_topic
    from cluster.data.locality import read_locality
    from cluster.data.read_planning import plan_topic_read

    ctx.progress("  stopping the shared Ray: this module runs its own 3-node cluster")
    stop_shared_ray(ctx)
    records = QUICK_RECORDS_PER_PARTITION if ctx.quick else RECORDS_PER_PARTITION
    with three_nodes(ctx):
        ray.data.DataContext.get_current().enable_progress_bars = False
        topic = f"bench-locality-{int(time.time() * 1000)}"
        Admin().create_topic(topic, PARTITIONS)
        nodes = set(Broker.connect().topic(topic).partitions.values())
        values = [os.urandom(VALUE_BYTES) for _ in range(records)]
        with Producer(batch_size=1_000_000, linger_ms=0) as producer:
            for partition in range(PARTITIONS):
                producer.send_many(topic, values, partition=partition).wait()
        leaders = plan_topic_read(topic).leaders
        shares = []
        tasks = rows_per_s = 0.0
        for _ in range(REPEATS):
            with timer() as elapsed:
                locality = read_locality(read_topic(topic, columns=["topic", "partition", "offset"]), leaders)
            if locality.rows != PARTITIONS * records:
                raise AssertionError(f"{topic}: read {locality.rows} of {PARTITIONS * records} rows")
            shares.append(locality.share)
            tasks = locality.tasks
            rows_per_s = max(rows_per_s, locality.rows / elapsed())
        ctx.progress(f"  {PARTITIONS} partitions on {len(nodes)} nodes: locality {shares}, {tasks:.0f} tasks")
    share = min(shares)
    return [
        absolute_figure(
            "ray_data_locality",
            share,
            "share",
            f">= {GOAL} ({tasks:.0f} read tasks a read, {PARTITIONS} partitions over {len(nodes)} nodes, worst of "
            f"{REPEATS} reads; {rows_per_s:,.0f} rows/s with the locality check)",
            share >= GOAL,
        )
    ]
