"""`raybroker sql`, run in-process through `cluster.cli.main.main` against the shared broker and Spark session."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import msgpack
import pytest

from actors.clients.admin import Admin
from cluster.cli.main import main
from cluster.runtime import gcs_address
from cluster.spark.session import active_session
from tests.cluster.spark.helpers import append, unique_topic

pytestmark = [pytest.mark.ray, pytest.mark.spark]

NOW_MS = int(time.time() * 1000)
PAGES = ("/", "/cart", "/help")


@pytest.fixture(scope="module")
def topics(spark_broker: Any) -> tuple[str, str, list[dict[str, Any]]]:
    """A 2-partition topic of msgpack page views, and a 1-partition topic of 7 plain records."""
    views = unique_topic("page-views")
    Admin().create_topic(views, 2)
    events = [{"user": f"u{i % 3}", "page": PAGES[i % 3], "latency_ms": i} for i in range(60)]
    for partition in range(2):
        records = [{"value": msgpack.packb(e), "timestamp": NOW_MS} for e in events[partition::2]]
        append(spark_broker, views, partition, records)
    other = unique_topic("other")
    Admin().create_topic(other, 1)
    append(spark_broker, other, 0, [{"value": b"x", "timestamp": NOW_MS}] * 7)
    return views, other, events


def table(text: str) -> list[list[str]]:
    """The cells of the rows `show()` printed (header first)."""
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("|")]


def test_sql_prints_the_result_table_of_a_query_over_decoded_values(
    spark: Any, topics: tuple[str, str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Its setup is slow (~25 s): the first Spark test of `tests/cluster/` starts the package's Spark session."""
    views, _, events = topics
    query = f"SELECT page, count(*) AS views, sum(latency_ms) AS total FROM `{views}` GROUP BY page ORDER BY page"
    code = main(["sql", query, "--topic", views, "--value-format", "msgpack", "--address", gcs_address()])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    counts = Counter(e["page"] for e in events)
    expected = [["page", "views", "total"]] + [
        [page, str(counts[page]), str(sum(e["latency_ms"] for e in events if e["page"] == page))]
        for page in sorted(counts)
    ]
    assert table(printed.out) == expected
    assert active_session() is spark, "the command stopped a session it did not start"


def test_sql_registers_every_topic_and_cuts_offset_json_per_topic(
    spark: Any, topics: tuple[str, str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    views, other, _ = topics
    starting = json.dumps({views: {"0": 20, "1": -2}, other: {"0": 5}})
    query = f"SELECT (SELECT count(*) FROM `{views}`) AS v, (SELECT count(*) FROM `{other}`) AS o"
    code = main(["sql", query, "--topic", views, "--topic", other, "--starting-offsets", starting])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert table(printed.out) == [["v", "o"], ["40", "2"]]


def test_sql_errors_are_one_line_and_exit_1(
    spark: Any, topics: tuple[str, str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    views, _, _ = topics
    assert main(["sql", "SELEKT nothing", "--topic", views]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("raybroker: error: SQL: ")
    assert main(["sql", "SELECT 1", "--topic", "no-such-topic"]) == 1
    assert "no-such-topic" in capsys.readouterr().err
    assert main(["sql", "SELECT 1", "--topic", views, "--starting-offsets", '{"x":{"0":1}}']) == 1
    assert main(["sql", "SELECT 1"]) == 2
