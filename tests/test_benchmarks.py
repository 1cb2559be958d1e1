"""`python -m benchmarks`: the table and JSON it reports, and one real `--quick` run of the storage figures.

The benchmarks' speed targets are not asserted here (they live in the benchmark output, not in timed tests);
these tests prove the command works and reports what the README promises.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import format_table
from benchmarks.common import absolute_figure, percentile, throughput_figure

REPO_ROOT = Path(__file__).resolve().parents[1]
JSON_KEYS = {"name", "value", "unit", "baseline_name", "baseline_value", "ratio", "goal", "met"}


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
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "no_such_figure"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "unknown benchmark no_such_figure" in result.stderr
    assert "Traceback" not in result.stderr


def test_quick_storage_run_writes_the_json_list(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "storage_append", "encode", "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(out.read_text())
    assert {figure["name"] for figure in figures} == {"storage_append", "encode"}
    for figure in figures:
        assert set(figure) == JSON_KEYS
        assert figure["value"] > 0 and figure["baseline_value"] > 0
        assert figure["ratio"] == pytest.approx(figure["value"] / figure["baseline_value"])
    assert "| storage_append" in result.stdout
    assert "storage_append" in result.stderr  # progress lines


@pytest.mark.ray
def test_quick_ray_data_run_reports_reads_and_writes_beside_their_baselines(tmp_path: Path) -> None:
    """`ray_data_read` and `ray_data_write` on an embedded Ray of their own (the benchmark's subprocess), each
    against Ray Data's Kafka connector through the listener, in the same run."""
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--only",
            "ray_data_read",
            "ray_data_write",
            "--json",
            str(out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = {figure["name"]: figure for figure in json.loads(out.read_text())}
    assert set(figures) == {"ray_data_read", "ray_data_write"}
    assert figures["ray_data_read"]["baseline_name"] == "ray.data.read_kafka"
    assert figures["ray_data_write"]["baseline_name"] == "Dataset.write_kafka"
    for figure in figures.values():
        assert figure["value"] > 0 and figure["baseline_value"] > 0
