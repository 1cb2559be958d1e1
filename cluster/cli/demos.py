"""`raybroker demo` (`cluster.demos.broker_demo`) and `raybroker storage-demo` (`cluster.demos.storage_demo`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cluster.demos.storage_demo import run_storage_demo


def add_commands(subcommands: Any) -> None:
    demo = subcommands.add_parser(
        "demo",
        help="the main job: an embedded Ray, the broker, a topic, producers and consumers",
        description=(
            "Start an embedded Ray cluster and the broker over two log dirs in a new temporary folder, create "
            "the topic 'page-views' with 4 partitions, produce msgpack page-view events through the idempotent "
            "producer, consume them back in a group and check every event came back exactly once, run Spark "
            "(RayDP) aggregations twice over the live partitions while a producer keeps writing, count page views "
            "per window with a Structured Streaming query (Spark's Kafka source over the broker's Kafka listener) "
            "for a few triggers, then shut everything down cleanly. Prints each step with its time, and the time "
            "of each part at the end."
        ),
    )
    demo.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="folder for the demo's log dirs (default: a new temporary folder, kept for inspection)",
    )
    demo.add_argument("--events", type=int, default=20_000, help="page-view events to produce (default 20000)")
    demo.add_argument("--no-spark", action="store_true", help="skip the Spark steps (no Java needed)")
    demo.add_argument(
        "--no-streaming",
        action="store_true",
        help="skip the Structured Streaming step (its Kafka connector comes from Maven Central on first use)",
    )
    demo.set_defaults(handler=run_demo)

    storage_demo = subcommands.add_parser(
        "storage-demo",
        help="a storage-only demo (no Ray): write, roll and read a partition log",
        description=(
            "Write a small partition log with every codec (none, gzip, snappy, lz4, zstd) and record headers, "
            "roll it, read it back and print where its files are. Starts no Ray; takes well under a second."
        ),
    )
    storage_demo.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory to write the demo log into (default: a new temporary directory, kept for inspection)",
    )
    storage_demo.set_defaults(handler=run_storage_demo_command)


def run_demo(args: argparse.Namespace) -> int:
    # Ray (the demo module imports the actors): loaded only when the demo runs, so the CLI starts fast.
    from cluster.demos.broker_demo import run_broker_demo

    return run_broker_demo(
        args.dir, events=args.events, out=sys.stdout, spark=not args.no_spark, streaming=not args.no_streaming
    )


def run_storage_demo_command(args: argparse.Namespace) -> int:
    # The stdout of this call, not the one the demo module's default captured when it was imported.
    return run_storage_demo(args.dir, out=sys.stdout)
