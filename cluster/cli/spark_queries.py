"""What the two commands that run Spark SQL over topics (`sql`, `stream`) share: their QUERY and --topic
arguments, and the Spark session they run on.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    """The QUERY and the repeatable --topic of a command that runs Spark SQL over topics, each topic a view named
    after it."""
    parser.add_argument("query", metavar="QUERY", help="the Spark SQL query")
    parser.add_argument(
        "--topic", dest="topics", action="append", required=True, metavar="TOPIC", help="a topic to query (repeatable)"
    )


@contextlib.contextmanager
def command_spark(*, kafka_connector: bool = False) -> Iterator[SparkSession]:
    """The Spark session a query command runs on: the one already running in this process (left running), or one
    started for the command and stopped when the block ends, however it ends."""
    # Spark: pyspark, RayDP and the JVM load only when a query runs (pyspark alone takes ~0.35 s to import).
    from cluster.spark.session import active_session, get_spark, stop_spark

    started = active_session() is None
    spark = get_spark(kafka_connector=kafka_connector)
    try:
        yield spark
    finally:
        if started:
            stop_spark()
