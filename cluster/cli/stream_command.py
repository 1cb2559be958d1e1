"""`raybroker stream`: a Spark Structured Streaming SQL query over live topics, its result printed per trigger.

    raybroker stream "SELECT window.start, count(*) AS views FROM `page-views`
                      GROUP BY window(timestamp, '10 seconds')" --topic page-views
        [--topic T2 ...] [--from-beginning] [--bootstrap-server HOST:PORT] [--trigger-interval-ms MS]
        [--max-triggers N] [--output-mode update|complete|append] [--max-rows N] [--address ADDR]

The command attaches to the running cluster (`--address`, as the broker commands do), starts a Spark session on it
with Spark's Kafka connector (`get_spark(kafka_connector=True)`), registers every `--topic` as a streaming
temporary view named after it (`spark.readStream.format("kafka")` over the cluster's Kafka listeners, or
`--bootstrap-server`: the Kafka source's columns key, value, topic, partition, offset, timestamp, timestampType),
and runs QUERY as a streaming query. Each micro-batch's result is printed under a `Batch: N` line, as Spark's
`show` prints a table (what Spark's console sink prints, but from this process, so it can be piped or captured).
Options are named as kafka-console-consumer.sh names them: the query reads from the latest offsets unless
`--from-beginning`; it runs until Ctrl-C (then the query and Spark are stopped, exit 130) or `--max-triggers`.

A query Spark cannot parse or analyse, or a streaming query that fails, is one line on stderr and exit 1, like the
broker commands' errors; no traceback. Spark (and Ray) are imported when the command runs, not at load time.
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

from cluster.cli.command_support import EXIT_OK, add_command, connect, first_line, positive_int, set_on_interrupt
from cluster.cli.spark_queries import add_query_arguments, command_spark
from storage.errors import InvalidRequestError

DEFAULT_TRIGGER_INTERVAL_MS = 5000
DEFAULT_MAX_ROWS = 20
OUTPUT_MODES = ("update", "complete", "append")
# How often the command checks whether the query ended, ran its --max-triggers or was interrupted.
POLL_S = 0.2


def add_commands(subcommands: Any) -> None:
    stream = add_command(
        subcommands,
        "stream",
        "run a Spark Structured Streaming SQL query over topics, printing its result every trigger",
        "Start Spark on the running Ray cluster (RayDP) with Spark's Kafka connector, register each --topic as a "
        "streaming view named after the topic (Spark's Kafka source over the cluster's Kafka listeners: key, "
        "value, topic, partition, offset, timestamp, timestampType), run QUERY as a streaming query and print "
        "each micro-batch's result until Ctrl-C or --max-triggers. Write topic names that are not SQL "
        "identifiers in backticks: SELECT count(*) FROM `page-views`.",
        epilog="Exit codes: 0 ok; 1 query, stream or broker error (one line on stderr); 2 usage error; 130 Ctrl-C.",
    )
    add_query_arguments(stream)
    stream.add_argument(
        "--from-beginning", action="store_true", help="start at the earliest offsets (default: the latest)"
    )
    stream.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=None,
        help="Kafka listeners to read from (default: the cluster's, as `raybroker start` announced them)",
    )
    stream.add_argument(
        "--trigger-interval-ms",
        type=positive_int,
        default=DEFAULT_TRIGGER_INTERVAL_MS,
        metavar="MS",
        help=f"start a micro-batch every MS milliseconds (default {DEFAULT_TRIGGER_INTERVAL_MS})",
    )
    stream.add_argument(
        "--max-triggers", type=positive_int, default=None, metavar="N", help="stop after N micro-batches"
    )
    stream.add_argument(
        "--output-mode",
        choices=OUTPUT_MODES,
        default="update",
        help="Spark's output mode: update (default), complete (aggregations only), append",
    )
    stream.add_argument(
        "--max-rows", type=positive_int, default=DEFAULT_MAX_ROWS, metavar="N", help="rows to print per batch at most"
    )
    stream.set_defaults(handler=run_stream)


def run_stream(args: argparse.Namespace) -> int:
    """The `stream` handler: registers the views, runs the query until Ctrl-C or --max-triggers, printing every
    micro-batch; stops the query, and the Spark it started."""
    connect(args.address)
    # Spark: pyspark, RayDP and the JVM load only when a query runs (pyspark alone takes ~0.35 s to import).
    from pyspark.errors import PySparkException

    from cluster.spark.session import kafka_bootstrap_servers

    servers = args.bootstrap_server or kafka_bootstrap_servers()
    batches = 0

    def print_batch(batch: Any, batch_id: int) -> None:
        nonlocal batches
        print(f"Batch: {batch_id}", flush=True)
        batch.show(n=args.max_rows, truncate=False)
        batches += 1

    query: Any = None
    interrupted = threading.Event()
    with command_spark(kafka_connector=True) as spark:
        try:
            for topic in dict.fromkeys(args.topics):
                (
                    spark.readStream.format("kafka")
                    .option("kafka.bootstrap.servers", servers)
                    .option("subscribe", topic)
                    .option("startingOffsets", "earliest" if args.from_beginning else "latest")
                    .load()
                    .createOrReplaceTempView(f"`{topic}`")
                )
            try:
                query = (
                    spark.sql(args.query)
                    .writeStream.outputMode(args.output_mode)
                    .foreachBatch(print_batch)
                    .trigger(processingTime=f"{args.trigger_interval_ms} milliseconds")
                    .start()
                )
            except PySparkException as exc:
                raise InvalidRequestError(f"SQL: {first_line(str(exc))}") from None
            # pyspark's own SIGINT handler cancels Spark's jobs through py4j, and when the signal lands while the
            # main thread waits on a py4j call (as `awaitTermination` does) that second call fails ("reentrant
            # call"): the loop below stops the query itself instead.
            with set_on_interrupt(interrupted):
                while query.isActive and not interrupted.is_set():
                    if args.max_triggers is not None and batches >= args.max_triggers:
                        break
                    interrupted.wait(POLL_S)
            failure = query.exception()
            if failure is not None:
                raise InvalidRequestError(f"the streaming query failed: {first_line(str(failure))}")
        finally:
            if query is not None:
                query.stop()
    if interrupted.is_set():
        raise KeyboardInterrupt
    return EXIT_OK
