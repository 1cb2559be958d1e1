"""`python -m benchmarks`: the table and JSON it reports, and one real `--quick` run of the storage figures.

The benchmarks' speed targets are not asserted here (they live in the benchmark output, not in timed tests);
these tests prove the command works and reports what the README promises.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_failover
from benchmarks.__main__ import figure_names, format_table
from benchmarks.common import BenchContext, Curves, Figure, absolute_figure, percentile, throughput_figure
from benchmarks.environment import RayEnvironment
from benchmarks.results import render
from benchmarks.run_info import RunInfo

REPO_ROOT = Path(__file__).resolve().parents[1]
JSON_KEYS = {"name", "value", "unit", "baseline_name", "baseline_value", "ratio", "goal", "met", "curves"}


def run_module(
    *args: str, timeout_s: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m ARGS...` from the repository root (in `env` if given), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=env,
    )


def quick_figure_beside_kafka(tmp_path: Path, name: str, timeout_s: float) -> dict[str, Any]:
    """The one figure `name` of a `--quick` run, checked against Apache Kafka's baseline: both values positive and
    the ratio ours over Kafka's."""
    out = tmp_path / "figures.json"
    result = run_module("benchmarks", "--quick", "--only", name, "--json", str(out), timeout_s=timeout_s)
    assert result.returncode == 0, result.stderr[-3000:]
    (figure,) = json.loads(out.read_text())["figures"]
    assert figure["name"] == name
    check_beside_kafka(figure)
    return dict(figure)


def check_beside_kafka(figure: dict[str, Any]) -> None:
    """A figure measured against Apache Kafka's baseline: both values positive, the ratio ours over Kafka's."""
    assert figure["baseline_name"].startswith("Apache Kafka")
    assert figure["value"] > 0 and figure["baseline_value"] > 0
    assert figure["ratio"] == pytest.approx(figure["value"] / figure["baseline_value"])


def test_throughput_figure_ratio_is_ours_over_baseline_and_met_against_the_minimum() -> None:
    figure = throughput_figure("encode", 300.0, "rec/s", "kafka-python", 100.0, 2.0, "ratio >= 2")
    assert figure.ratio == pytest.approx(3.0)
    assert figure.met is True
    slower = throughput_figure("encode", 150.0, "rec/s", "kafka-python", 100.0, 2.0, "ratio >= 2")
    assert slower.met is False
    report_only = throughput_figure("compaction", 10.0, "MB/s", "raw read", 100.0, None, "report")
    assert report_only.met is None
    assert report_only.ratio == pytest.approx(0.1)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_a_failover_is_timed_to_the_first_write_of_a_later_epoch_and_a_side_without_one_is_unmet(
    tmp_path: Path,
) -> None:
    """`bench_failover` reads the partition back as (offset, sequence, leader epoch) and times the failover to the
    first write acknowledged after the fault in a later epoch; a side whose writes after the fault all stayed in the
    old epoch is reported with its time to the first of them, as no failover, and its figure is unmet."""
    ctx = BenchContext(quick=True, workdir=tmp_path, environment=RayEnvironment(tmp_path))
    writer = bench_failover.Writer("127.0.0.1:9092", "t", 0)
    writer.acked = [(1.0, 0, 0), (2.0, 1, 1), (3.5, 2, 2), (4.0, 3, 3)]
    judged = {}
    for name, epochs in {"failed over": (0, 0, 0, 1), "stayed": (0, 0, 0, 0)}.items():
        records = [(offset, offset, epoch) for offset, epoch in enumerate(epochs)]
        judged[name] = bench_failover._judge(ctx, name, writer, records, 3.0, 3.2, 2, None, None, "leader 1")
    assert judged["failed over"].failed_over and judged["failed over"].seconds == pytest.approx(1.0)
    assert not judged["stayed"].failed_over and judged["stayed"].seconds == pytest.approx(0.5)
    assert "NO acknowledged write in a leader epoch after 0" in judged["stayed"].text
    assert judged["stayed"].intact, "nothing was lost: the text, not the data, says what went wrong"
    figure = bench_failover._figure("failover_s", "leader SIGKILLed", judged["failed over"], judged["stayed"])
    assert figure.met is False
    figure = bench_failover._figure("failover_s", "leader SIGKILLed", judged["failed over"], judged["failed over"])
    assert figure.met is (bench_failover.GOAL_S >= 1.0 and bench_failover.GOAL_RATIO >= 1.0)


def test_table_lists_every_figure_with_its_ratio_and_verdict() -> None:
    figures = [
        throughput_figure("storage_append", 800.0, "MB/s", "raw write", 1000.0, 0.8, "ratio >= 0.8"),
        absolute_figure("lookup", 12.5, "us p99", "p99 < 50 us", True),
    ]
    lines = format_table(figures).splitlines()
    assert len(lines) == 4
    assert "| storage_append" in lines[2] and "0.80" in lines[2] and "yes" in lines[2]
    assert "| lookup" in lines[3] and "12.5" in lines[3]


def test_unknown_benchmark_name_is_a_one_line_error() -> None:
    result = run_module("benchmarks", "--only", "no_such_figure")
    assert result.returncode != 0
    assert "unknown benchmark no_such_figure" in result.stderr
    assert "Traceback" not in result.stderr


def test_quick_storage_run_writes_the_run_and_its_figures_and_renders_them_as_results(tmp_path: Path) -> None:
    """One real `--quick` run of two Ray-free figures, its JSON, and `python -m benchmarks.results` over it: the
    Markdown names the machine and versions of that run, each figure beside its same-run baseline, and every
    figure the run did not measure."""
    out = tmp_path / "run.json"
    result = run_module(
        "benchmarks", "--quick", "--only", "storage_append", "encode", "--json", str(out), timeout_s=300
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    figures = document["figures"]
    assert {figure["name"] for figure in figures} == {"storage_append", "encode"}
    for figure in figures:
        assert set(figure) == JSON_KEYS
        assert figure["value"] > 0 and figure["baseline_value"] > 0
        assert figure["ratio"] == pytest.approx(figure["value"] / figure["baseline_value"])
    run = document["run"]
    assert run["mode"] == "quick" and run["only"] == ["storage_append", "encode"]
    assert run["cores"] == os.cpu_count() and run["python"] == platform.python_version()
    assert run["packages"]["ray"] == importlib.metadata.version("ray")
    assert run["duration_s"] > 0
    assert "| storage_append" in result.stdout
    assert "storage_append" in result.stderr  # progress lines

    rendered = run_module("benchmarks.results", str(out))
    assert rendered.returncode == 0, rendered.stderr
    markdown = rendered.stdout
    assert f"| Python | {platform.python_version()} |" in markdown
    assert f"ray {importlib.metadata.version('ray')}" in markdown
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in markdown.splitlines() if line.startswith("| `")}
    assert set(rows) == {"`storage_append`", "`encode`"}
    encode = next(figure for figure in figures if figure["name"] == "encode")
    assert f"({encode['baseline_name']})" in rows["`encode`"] and f"{encode['ratio']:.2f}" in rows["`encode`"]
    assert "Not measured in this run" in markdown and "`produce_rf3`" in markdown


def test_results_of_a_file_that_is_not_a_run_is_a_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "list.json"
    bad.write_text("[]")
    result = run_module("benchmarks.results", str(bad))
    assert result.returncode == 1
    assert result.stderr.startswith("python -m benchmarks.results: error: ") and len(result.stderr.splitlines()) == 1


def sample_run(mode: str = "full", only: list[str] | None = None) -> RunInfo:
    """A run's circumstances as `collect` records them, without asking this machine (`java -version`)."""
    return RunInfo(
        started_utc="2026-01-01 00:00 UTC",
        mode=mode,
        only=only,
        duration_s=1.0,
        os="Linux",
        cpu_model=None,
        cores=2,
        memory_gib=1.0,
        load_average_start=[0.0, 0.0, 0.0],
        load_average_end=None,
        python="3.11",
        java=None,
        apache_kafka="3.9.1",
        packages={"ray": None},
        commit=None,
    )


def test_results_table_escapes_pipes_and_marks_missed_goals() -> None:
    info = sample_run()
    figures = [throughput_figure(name, 1.0, "x/s", "a|b", 2.0, 1.0, "ratio >= 1") for name in figure_names()]
    markdown = render(info, figures)
    assert "Every figure was measured in this run." in markdown
    assert "Measured with no baseline" not in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| `encode`"))
    assert "(a\\|b)" in row and "| 0.50 |" in row and row.endswith("| **no** |")

    absolute = absolute_figure("lookup", 131.0, "us p99", "p99 < 50 us", False)
    markdown = render(info, [*(figure for figure in figures if figure.name != "lookup"), absolute])
    assert (
        "Measured with no baseline beside them (their goals are absolute, their baseline cell says so): `lookup`."
        in (markdown)
    )
    row = next(line for line in markdown.splitlines() if line.startswith("| `lookup`"))
    assert row == "| `lookup` | 131 us p99 | none (absolute goal) | - | p99 < 50 us | **no** |"


@pytest.fixture(scope="module")
def quick_ray_figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """`ray_data_read`, `ray_data_write`, `iceberg_translate`, `iceberg_lag_p99`, `iceberg_scan` and `create_topic_s` of
    one `--quick` run, by name: one run, so one embedded Ray, broker and listener of the benchmark's own (its
    subprocess) serve them. Slow (~3 min): 24 partitions, every Ray Data read and write of both sides once, 10 s of
    translation under load, a Spark session, and an Apache Kafka JVM, which is what `--quick` runs."""
    out = tmp_path_factory.mktemp("quick-ray") / "figures.json"
    names = [
        "ray_data_read",
        "ray_data_write",
        "iceberg_translate",
        "iceberg_lag_p99",
        "iceberg_scan",
        "create_topic_s",
    ]
    result = run_module("benchmarks", "--quick", "--only", *names, "--json", str(out), timeout_s=900)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = {figure["name"]: figure for figure in json.loads(out.read_text())["figures"]}
    assert set(figures) == set(names)
    return figures


@pytest.mark.ray
@pytest.mark.kafka
def test_quick_ray_data_run_reports_reads_and_writes_beside_their_baselines(
    quick_ray_figures: dict[str, dict[str, Any]],
) -> None:
    """`ray_data_read` and `ray_data_write`, each against Ray Data's Kafka connector through the listener, in the
    same run."""
    assert quick_ray_figures["ray_data_read"]["baseline_name"] == "ray.data.read_kafka"
    assert quick_ray_figures["ray_data_write"]["baseline_name"] == "Dataset.write_kafka"
    for name in ("ray_data_read", "ray_data_write"):
        assert quick_ray_figures[name]["value"] > 0 and quick_ray_figures[name]["baseline_value"] > 0


@pytest.mark.ray
@pytest.mark.kafka
@pytest.mark.spark
def test_quick_iceberg_run_reports_translation_beside_ray_datas_the_lag_p99_and_the_scan(
    quick_ray_figures: dict[str, dict[str, Any]],
) -> None:
    """`iceberg_translate` against Ray Data's `read_kafka` + `write_iceberg` on the same records, in the same run (the
    benchmark itself checks each table holds every record once), `iceberg_lag_p99`, an absolute goal, and
    `iceberg_scan` against Spark over the table's files (the benchmark checks both answer the same)."""
    figure = quick_ray_figures["iceberg_translate"]
    assert figure["baseline_name"] == "ray.data.read_kafka + write_iceberg"
    assert figure["value"] > 0 and figure["baseline_value"] > 0 and figure["unit"] == "MB/s"
    lag = quick_ray_figures["iceberg_lag_p99"]
    assert lag["baseline_name"] is None and lag["unit"] == "ms" and lag["value"] > 0
    assert lag["goal"].startswith("p99 <= iceberg.target.lag.ms (3000 ms) at 2 MB/s offered")
    scan = quick_ray_figures["iceberg_scan"]
    assert scan["baseline_name"] == "spark.read.parquet of the table's files"
    assert scan["value"] > 0 and scan["baseline_value"] > 0 and scan["unit"] == "MB/s"


@pytest.mark.ray
@pytest.mark.kafka
def test_quick_create_topic_run_reports_the_time_beside_kafkas(quick_ray_figures: dict[str, dict[str, Any]]) -> None:
    """`create_topic_s` on the benchmark's broker and on Apache Kafka, both driven by the same Admin and Producer
    clients in the same run; the ratio is ours over Kafka's time."""
    check_beside_kafka(quick_ray_figures["create_topic_s"])


@pytest.mark.kafka
def test_quick_storage_append_kafka_run_reports_ours_beside_kafkas_own_append(tmp_path: Path) -> None:
    """`storage_append_kafka`: the same batches appended by `Log.append` and by Apache Kafka's
    `UnifiedLog.appendAsLeader` (benchmarks/java/KafkaAppend.java, compiled and run in a JVM of its own); the ratio
    is ours over Kafka's MB/s, and the goal text gives Kafka's share of its JVM's write + CRC floor."""
    figure = quick_figure_beside_kafka(tmp_path, "storage_append_kafka", 600)
    assert "of its JVM's FileChannel.write + CRC-32C" in figure["goal"]


def test_serve_tasks_without_redis_server_fails_saying_so(tmp_path: Path) -> None:
    """The Celery baseline needs Debian's redis-server: without it on the PATH the run fails (exit 1) with a message
    naming the package, before any Ray starts, rather than reporting no figure."""
    env = {**os.environ, "PATH": str(tmp_path)}
    result = run_module("benchmarks", "--quick", "--only", "serve_tasks", env=env)
    assert result.returncode == 1
    assert "redis-server is not installed" in result.stderr and "apt-get install redis-server" in result.stderr
    assert "failed: bench_serve_tasks" in result.stderr


@pytest.mark.ray
def test_quick_serve_tasks_run_reports_tasks_per_second_beside_celerys(tmp_path: Path) -> None:
    """`serve_tasks`: the same Serve app on raybroker's task processor and on Ray's Celery adapter over a Redis server
    of the benchmark's own, in one run (every task's result checked by the run); the ratio is ours over Celery's."""
    out = tmp_path / "figures.json"
    result = run_module("benchmarks", "--quick", "--only", "serve_tasks", "--json", str(out), timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (figure,) = json.loads(out.read_text())["figures"]
    assert figure["name"] == "serve_tasks" and figure["unit"] == "tasks/s"
    assert figure["baseline_name"].startswith("Ray Serve's Celery adapter on Redis")
    assert figure["value"] > 0 and figure["baseline_value"] > 0
    assert figure["ratio"] == pytest.approx(figure["value"] / figure["baseline_value"])


@pytest.mark.ray
@pytest.mark.kafka
@pytest.mark.timeout(1260)
def test_quick_omb_run_reports_throughput_and_e2e_p99_beside_kafkas(tmp_path: Path) -> None:
    """`omb_throughput` and `omb_e2e_p99`: the OpenMessaging Benchmark, built from its pinned source, against raybroker
    on three Ray nodes and a three-broker Apache Kafka in one run; the e2e figure's rate is half Kafka's measured
    maximum, and its ratio is ours over Kafka's p99. Slow: ~3 minutes on a quiet machine (both clusters' start and
    one OMB run per side and figure), over 10 with a load average near 100."""
    out = tmp_path / "figures.json"
    names = ["omb_throughput", "omb_e2e_p99"]
    result = run_module("benchmarks", "--quick", "--only", *names, "--json", str(out), timeout_s=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = {figure["name"]: figure for figure in json.loads(out.read_text())["figures"]}
    assert set(figures) == set(names)
    for figure in figures.values():
        check_beside_kafka(figure)
    assert (
        figures["omb_throughput"]["unit"] == "MB/s"
        and "1-topic-100-partitions-1kb" in figures["omb_throughput"]["goal"]
    )
    assert figures["omb_e2e_p99"]["unit"] == "ms" and "half Kafka's max" in figures["omb_e2e_p99"]["goal"]
    fixed_rate = float(figures["omb_e2e_p99"]["goal"].split(" msg/s")[0].rsplit(", ", 1)[1].replace(",", ""))
    kafka_max_msgs_s = figures["omb_throughput"]["baseline_value"] * 1024  # MiB/s of 1 KiB payloads
    assert fixed_rate == pytest.approx(kafka_max_msgs_s / 2, rel=0.01)
    # Each side's latency distribution, for the plot: percentiles from p1 to p99.99, latencies never decreasing, and
    # its p99 the figure's own.
    lines = figures["omb_e2e_p99"]["curves"]["lines"]
    assert set(lines) == {"raybroker", "kafka"}
    for side, points in lines.items():
        percentiles = [percent for _, percent in points]
        latencies = [ms for ms, _ in points]
        assert percentiles[0] == 1 and percentiles[-1] == 99.99 and percentiles == sorted(percentiles)
        assert latencies == sorted(latencies)
        p99 = dict((percent, ms) for ms, percent in points)[99]
        assert p99 == (
            figures["omb_e2e_p99"]["value"] if side == "raybroker" else figures["omb_e2e_p99"]["baseline_value"]
        )


def test_a_figures_curves_survive_its_json_and_are_drawn_as_a_png(tmp_path: Path) -> None:
    """A figure with curves, written as `--json` writes it and read back by `python -m benchmarks.results --plots`:
    the same figure comes back, the plot of each figure with curves is a PNG named after it, and a figure without
    curves has none; a run written before figures had curves still loads."""
    curves = Curves(
        "producer throughput",
        "partitions",
        "records/s",
        {"raybroker": [(10.0, 500_000.0), (1_000.0, 75_000.0)], "kafka": [(10.0, 340_000.0), (1_000.0, 47_000.0)]},
        log_x=True,
    )
    scaled = throughput_figure(
        "partitions_scaling", 75_000.0, "rec/s", "Apache Kafka", 47_000.0, 1.0, "ratio >= 1", curves
    )
    plain = absolute_figure("lookup", 12.5, "us p99", "p99 < 50 us", True)
    info = sample_run("quick", ["partitions_scaling", "lookup"])
    document = {"run": info.to_json(), "figures": [scaled.to_json(), plain.to_json()]}
    assert Figure.from_json(json.loads(json.dumps(document["figures"][0]))) == scaled
    run = tmp_path / "run.json"
    run.write_text(json.dumps(document))
    plots = tmp_path / "plots"
    result = run_module("benchmarks.results", str(run), "--plots", str(plots), timeout_s=120)
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in plots.iterdir()) == ["partitions_scaling.png"]
    assert (plots / "partitions_scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| `partitions_scaling` |" in result.stdout

    del document["figures"][1]["curves"]
    run.write_text(json.dumps(document))
    assert run_module("benchmarks.results", str(run), timeout_s=120).returncode == 0
