"""`raybroker sql`: one Spark SQL query over live topics, printed as a table.

    raybroker sql "SELECT page, count(*) AS views FROM `page-views` GROUP BY page" --topic page-views
        [--topic T2 ...] [--value-format binary|string|json|msgpack] [--value-schema DDL]
        [--starting-offsets earliest|latest|JSON] [--ending-offsets latest|JSON] [--include-headers]
        [--max-rows N] [--address ADDR]

The command attaches to the running cluster (`--address`, as the broker commands do), starts a Spark session on
it (`cluster.spark.session`), registers every `--topic` as a temporary view named after the topic, runs the query and
prints the result as Spark's `show` does (every column in full, at most `--max-rows` rows, then "only showing top
N rows"), and stops the session it started. The views have Spark's Kafka-source columns
(`cluster.spark.kafka_source`); with `--value-format` the value is decoded into columns
(`cluster.spark.spark_value_formats`), with
`--value-schema` (Spark DDL, e.g. `"user string, page string, latency_ms long"`) or a schema inferred from a
sample of the topic. Every view is planned before the query runs: it reads a fixed snapshot of its topic, from
`--starting-offsets` to `--ending-offsets` (Spark's option values; per-partition JSON may name several topics,
each view takes its own). A topic name that is not a plain SQL identifier is written in backticks in the query
(`page-views`).

A query Spark cannot parse or analyse, or a read that fails, is one line on stderr and exit 1, like the broker
commands' errors; no traceback. Spark (and Ray) are imported when the command runs, not at load time.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from cluster.cli.command_support import EXIT_OK, add_command, connect, first_line, positive_int
from cluster.cli.spark_queries import add_query_arguments, command_spark
from storage.errors import InvalidRequestError

DEFAULT_MAX_ROWS = 1000
# `cluster.records.value_formats.VALUE_FORMATS`, repeated: importing that module loads pyarrow, too slow for `--help`.
VALUE_FORMATS = ("binary", "string", "json", "msgpack")


def add_commands(subcommands: Any) -> None:
    sql = add_command(
        subcommands,
        "sql",
        "run a Spark SQL query over topics, each registered as a view named after it",
        "Start Spark on the running Ray cluster (RayDP), register each --topic as a temporary view named after "
        "the topic (Spark's Kafka-source columns: key, value, topic, partition, offset, timestamp, "
        "timestampType; decoded value columns with --value-format), run QUERY and print the result table. "
        "Write topic names that are not SQL identifiers in backticks: SELECT count(*) FROM `page-views`.",
        epilog="Exit codes: 0 ok; 1 query, read or broker error (one line on stderr); 2 usage error.",
    )
    add_query_arguments(sql)
    sql.add_argument(
        "--value-format",
        choices=VALUE_FORMATS,
        default="binary",
        help="decode record values into columns (default: binary, the raw bytes)",
    )
    sql.add_argument("--value-schema", metavar="DDL", default=None, help="the value columns as Spark DDL")
    sql.add_argument(
        "--starting-offsets",
        default="earliest",
        metavar="SPEC",
        help='earliest, latest, or JSON like {"t":{"0":23,"1":-2}} (-2 earliest, -1 latest); default earliest',
    )
    sql.add_argument(
        "--ending-offsets", default="latest", metavar="SPEC", help='latest, or JSON like {"t":{"0":50}}; default latest'
    )
    sql.add_argument("--include-headers", action="store_true", help="add the headers column")
    sql.add_argument(
        "--max-rows", type=positive_int, default=DEFAULT_MAX_ROWS, metavar="N", help="rows to print at most"
    )
    sql.set_defaults(handler=run_sql)


def _for_topic(spec: str, topic: str, option: str) -> str:
    """`earliest`/`latest` as given; a JSON spec cut down to `topic`'s partitions."""
    if spec in ("earliest", "latest"):
        return spec
    try:
        parsed = json.loads(spec)
    except ValueError as exc:
        raise InvalidRequestError(f"{option} is neither earliest, latest nor JSON: {exc}") from None
    if not isinstance(parsed, dict) or topic not in parsed:
        raise InvalidRequestError(f"{option} names no offsets for topic {topic!r}")
    return json.dumps({topic: parsed[topic]})


def run_sql(args: argparse.Namespace) -> int:
    """The `sql` handler: plans every view, runs the query, prints the table; stops the Spark it started."""
    connect(args.address)
    # Spark: pyspark, RayDP and the JVM load only when a query runs (pyspark alone takes ~0.35 s to import).
    from pyspark.errors import PySparkException

    from cluster.spark.kafka_source import read_topics
    from cluster.spark.session import typed_spark_error

    with command_spark() as spark:
        for topic in dict.fromkeys(args.topics):
            df = read_topics(
                spark,
                topics=[topic],
                startingOffsets=_for_topic(args.starting_offsets, topic, "--starting-offsets"),
                endingOffsets=_for_topic(args.ending_offsets, topic, "--ending-offsets"),
                includeHeaders=args.include_headers,
                valueFormat=args.value_format,
                valueSchema=args.value_schema,
            )
            df.createOrReplaceTempView(f"`{topic}`")
        try:
            spark.sql(args.query).show(n=args.max_rows, truncate=False)
        except PySparkException as exc:
            typed = typed_spark_error(exc)
            if typed is not None:
                raise typed from None
            raise InvalidRequestError(f"SQL: {first_line(str(exc))}") from None
    return EXIT_OK
