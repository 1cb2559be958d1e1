"""`raybroker stream`, run in-process through `cluster.cli.main.main` against the shared broker and Spark session
(with Spark's Kafka connector) and a Kafka listener of this process."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from actors.clients.admin import Admin
from cluster.cli.main import EXIT_INTERRUPTED, main
from cluster.protocol.listener import KafkaListener
from cluster.spark.session import active_session
from tests.cluster.spark.helpers import append, unique_topic

NOW_MS = int(time.time() * 1000)


def test_help_names_the_kafka_style_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stream", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--topic", "--from-beginning", "--bootstrap-server", "--max-triggers", "--output-mode"):
        assert option in out
    assert "Exit codes" in out


@pytest.fixture(scope="module")
def topic(spark_broker: Any) -> Iterator[str]:
    """A 2-partition topic of 30 records whose values are three pages, and a listener announcing itself."""
    name = unique_topic("stream-views")
    Admin().create_topic(name, 2)
    for partition in range(2):
        values = [f"/p{index % 3}".encode() for index in range(partition, 30, 2)]
        append(spark_broker, name, partition, [{"value": value, "timestamp": NOW_MS} for value in values])
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}):
        yield name


@pytest.mark.ray
@pytest.mark.spark
def test_stream_prints_each_micro_batch_and_stops_after_max_triggers(
    spark: Any, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    query = f"SELECT CAST(value AS STRING) AS page, count(*) AS views FROM `{topic}` GROUP BY page"
    argv = ["stream", query, "--topic", topic, "--from-beginning", "--output-mode", "complete"]
    code = main([*argv, "--max-triggers", "1", "--trigger-interval-ms", "500"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    lines = printed.out.splitlines()
    assert lines[0] == "Batch: 0"
    rows = sorted([cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:] if line.startswith("|"))
    assert rows == [["/p0", "10"], ["/p1", "10"], ["/p2", "10"], ["page", "views"]]
    assert active_session() is spark, "the command stopped a session it did not start"
    assert not spark.streams.active, "the command left its query running"


@pytest.mark.ray
@pytest.mark.spark
def test_stream_errors_are_one_line_and_exit_1(spark: Any, topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stream", "SELEKT nothing", "--topic", topic]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("raybroker: error: SQL: ")
    # An aggregation without a watermark cannot run in append mode: refused when the query starts.
    aggregate = f"SELECT count(*) FROM `{topic}`"
    assert main(["stream", aggregate, "--topic", topic, "--output-mode", "append"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("raybroker: error: SQL: ")
    assert not spark.streams.active


@pytest.mark.ray
@pytest.mark.spark
def test_ctrl_c_stops_the_query_and_exits_130_without_a_traceback(
    spark: Any, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupt_after_the_first_trigger() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            active = spark.streams.active
            if active and active[0].lastProgress is not None:
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    interrupter = threading.Thread(target=interrupt_after_the_first_trigger)
    interrupter.start()
    code = main(["stream", f"SELECT value FROM `{topic}`", "--topic", topic, "--trigger-interval-ms", "500"])
    interrupter.join()
    printed = capsys.readouterr()
    assert code == EXIT_INTERRUPTED
    assert "Traceback" not in printed.err and "Batch: 0" in printed.out
    assert not spark.streams.active
    assert active_session() is spark
