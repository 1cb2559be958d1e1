"""`python -m benchmarks`: runs every benchmark module in order, prints a table, writes the run as JSON.

Storage benchmarks run first (no Ray), then the actor benchmarks over one shared embedded Ray and broker, then
Spark. `--quick` shrinks every workload, to minutes for the whole command (most of it starting Ray,
Spark and Kafka's JVMs); the full run takes about an hour. A benchmark that fails is reported as such and the
others still run; the exit status is 1 then.

`--json PATH` writes `{"run": ..., "figures": [...]}`: the run's circumstances (`benchmarks.run_info.RunInfo`:
date, machine, versions, commit, which figures were asked for) and every figure (`Figure.to_json`), the input of
`python -m benchmarks.results`, which renders `benchmarks/RESULTS.md`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.common import BenchContext, Figure
from benchmarks.environment import RayEnvironment
from benchmarks.run_info import RunInfo, collect, finished

# Module names under `benchmarks/`, in run order, and the figure names each reports (for `--only`).
BENCHMARKS: dict[str, tuple[str, ...]] = {
    "bench_storage": ("storage_append", "lookup", "recovery", "compaction"),
    "bench_storage_kafka": ("storage_append_kafka",),
    "bench_codec": ("encode", "decode"),
    "bench_produce": ("produce_1p", "latency"),
    "bench_send": ("produce_send",),
    "bench_fetch": ("fetch_remote", "fetch_local"),
    "bench_spark": ("spark_ingest", "spark_ingest_128"),
    "bench_spark_kafka": ("spark_kafka_source",),
    "bench_partitions": ("partitions_per_node", "partitions_create_s"),
    "bench_cleaner": ("append_during_compaction",),
    "bench_wire": ("wire_produce", "wire_fetch", "wire_latency"),
    "bench_wire_tls": ("wire_produce_tls", "wire_fetch_tls"),
    "bench_metrics": ("metrics_produce_send", "metrics_wire_produce"),
    "bench_txn": ("txn_produce", "txn_vs_idempotent"),
    "bench_txn_v2": ("txn_produce_v2",),
    "bench_streams": ("streams_eos",),
    "bench_groups": ("group_join_s", "group_join_consumer_s"),
    "bench_shares": ("share_consume",),
    "bench_serve_tasks": ("serve_tasks",),
    "bench_topics": ("create_topic_s",),
    "bench_scaling": ("partitions_scaling", "partitions_scaling_memory", "partitions_scaling_create_s"),
    "bench_ray_data": ("ray_data_read", "ray_data_write"),
    # Last: these stop the shared Ray and run a 3-node cluster of their own.
    "bench_ray_data_locality": ("ray_data_locality",),
    "bench_replication": ("produce_rf3", "txn_produce_rf3"),
    "bench_replication_kafka": ("produce_rf3_kafka",),
    "bench_failover": ("failover_s", "failover_pause_s"),
    "bench_head_loss": ("head_loss_stall_s",),
    "bench_reassign": ("reassign_mb_s", "reassign_produce_p99"),
    "bench_omb": ("omb_throughput", "omb_throughput_16p", "omb_e2e_p99", "omb_exactly_once"),
    "bench_iceberg": ("iceberg_translate", "iceberg_lag_p99", "iceberg_scan"),
}


def figure_names() -> list[str]:
    return [name for names in BENCHMARKS.values() for name in names]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure raybroker against its baselines, side by side, and print the ratios.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small workloads: minutes for the whole run, not the full run's hour"
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the run and its figures as JSON to PATH ('-' = stdout)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help=f"run only the benchmarks reporting these figures ({', '.join(figure_names())})",
    )
    parser.add_argument("--workdir", metavar="DIR", help="where to write the benchmark logs (default: a temp dir)")
    return parser


def format_number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_table(figures: list[Figure]) -> str:
    """The figures as a Markdown table, as the run prints it."""
    rows = [("name", "value", "unit", "baseline", "baseline value", "ratio", "goal", "met")]
    for figure in figures:
        met = "-" if figure.met is None else ("yes" if figure.met else "NO")
        rows.append(
            (
                figure.name,
                format_number(figure.value),
                figure.unit,
                figure.baseline_name or "-",
                format_number(figure.baseline_value),
                "-" if figure.ratio is None else f"{figure.ratio:.2f}",
                figure.goal,
                met,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |" for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return "\n".join(lines)


def machine_description(info: RunInfo) -> str:
    return f"{info.os}, {info.cores} cores, {info.memory_gib:g} GiB, Python {info.python}"


def _selected(only: list[str] | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    unknown = sorted(set(only) - set(figure_names()))
    if unknown:
        known = ", ".join(figure_names())
        raise SystemExit(f"python -m benchmarks: unknown benchmark {', '.join(unknown)} (known: {known})")
    return [module for module, names in BENCHMARKS.items() if set(names) & set(only)]


def run(quick: bool, only: list[str] | None, workdir: Path) -> tuple[list[Figure], list[str]]:
    """Runs the selected benchmark modules; returns the figures and the names of modules that failed."""
    figures: list[Figure] = []
    failed: list[str] = []
    environment = RayEnvironment(workdir / "broker")
    ctx = BenchContext(quick=quick, workdir=workdir, environment=environment)
    try:
        for module_name in _selected(only):
            ctx.progress(f"{module_name} ...")
            module: Any = importlib.import_module(f"benchmarks.{module_name}")
            try:
                produced = module.run(ctx)
            except Exception:
                traceback.print_exc()
                failed.append(module_name)
                continue
            for figure in produced:
                if only and figure.name not in only:
                    continue
                figures.append(figure)
                ctx.progress(f"  {figure.name}: {format_number(figure.value)} {figure.unit}")
    finally:
        environment.close()
    return figures, failed


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    own_workdir = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="raybroker-bench-")) if own_workdir else Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    info = collect("quick" if args.quick else "full", args.only)
    started = time.perf_counter()
    try:
        figures, failed = run(args.quick, args.only, workdir)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    info = finished(info, time.perf_counter() - started)
    print(format_table(figures))
    print(f"\n{machine_description(info)}; {info.mode} run in {info.duration_s:.0f} s")
    if args.json:
        document = {"run": info.to_json(), "figures": [figure.to_json() for figure in figures]}
        text = json.dumps(document, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    if failed:
        print(f"python -m benchmarks: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
