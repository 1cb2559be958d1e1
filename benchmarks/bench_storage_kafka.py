"""raybroker's append against Apache Kafka's own, on the same batches and disk in the same run (no Ray).

| figure                 | measured                                   | baseline                                   |
|------------------------|--------------------------------------------|--------------------------------------------|
| `storage_append_kafka` | `Log.append` of `storage_append`'s 1 MB    | Apache Kafka 3.9.1's                       |
|                        | batches, MB/s (best round)                 | `UnifiedLog.appendAsLeader` of the same    |
|                        |                                            | batches (`java/KafkaAppend.java`)          |

Kafka's side is `benchmarks/java/KafkaAppend.java`, compiled with `javac` against Kafka's jars
(`benchmarks.kafka_broker.kafka_jars`) into the run's scratch folder and run in a JVM of its own: the broker's
produce path below the request handler (CRC check, every record decoded by `LogValidator`, offsets assigned in
place, the segment's `FileChannel` write, index and producer-state upkeep), each round on a fresh log, after two
rounds that warm the JIT. It also times the JVM's own floor of the same bytes (`FileChannel.write` plus one CRC-32C
pass), and the goal text gives Kafka's append as a share of it, the JVM's counterpart of `storage_append`'s ratio.

raybroker's rounds run before and after the JVM, best of them, so both see the same machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from benchmarks.bench_storage import append_batches, log_append_rate
from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.kafka_broker import KAFKA_VERSION, KafkaUnavailable, kafka_jars

JAVA_SOURCE = Path(__file__).parent / "java" / "KafkaAppend.java"
KAFKA_ROUNDS = 5
OURS_ROUNDS = 2  # before the JVM and after it
COMPILE_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 600.0
HEAP = "-Xmx1g"


def run(ctx: BenchContext) -> list[Figure]:
    batches, total_batches = append_batches(ctx)
    ctx.progress(f"storage_append_kafka: {total_batches} batches of {len(batches[0]):,} bytes a round")
    ours = log_append_rate(ctx, batches, total_batches)
    kafka = kafka_append_rates(ctx, batches, total_batches)
    for _ in range(OURS_ROUNDS - 1):
        ours = max(ours, log_append_rate(ctx, batches, total_batches))
    ctx.progress(
        f"  storage_append_kafka: {ours:,.0f} vs Kafka {kafka['append_mb_s']:,.0f} MB/s "
        f"(Kafka's JVM write + CRC {kafka['write_crc_mb_s']:,.0f})"
    )
    kafka_share = kafka["append_mb_s"] / kafka["write_crc_mb_s"]
    return [
        throughput_figure(
            "storage_append_kafka",
            ours,
            "MB/s",
            f"Apache Kafka {KAFKA_VERSION} UnifiedLog.appendAsLeader",
            kafka["append_mb_s"],
            1.0,
            f"ratio >= 1.0 (Kafka's append is {kafka_share:.2f} of its JVM's FileChannel.write + CRC-32C, "
            f"{kafka['write_crc_mb_s']:,.0f} MB/s)",
        )
    ]


def kafka_append_rates(ctx: BenchContext, batches: list[bytes], total_batches: int) -> dict[str, float]:
    """Kafka's append and its JVM floor in MB/s, best of `KAFKA_ROUNDS` rounds of `total_batches` appends cycling
    through `batches`; `KafkaUnavailable` when Java or Kafka's jars are missing or the JVM fails."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        raise KafkaUnavailable("a JDK (javac and java) is needed to run Apache Kafka's append")
    classpath = ":".join(str(jar) for jar in kafka_jars())
    work = ctx.scratch("kafka-append")
    classes = work / "classes"
    batches_file = work / "batches.bin"
    batches_file.write_bytes(b"".join(batches))
    _run([javac, "-d", str(classes), "-cp", classpath, str(JAVA_SOURCE)], COMPILE_TIMEOUT_S, "compiling")
    output = _run(
        [
            java,
            HEAP,
            "-cp",
            f"{classes}:{classpath}",
            "KafkaAppend",
            str(batches_file),
            str(total_batches),
            str(KAFKA_ROUNDS),
            str(work / "logs"),
        ],
        RUN_TIMEOUT_S,
        "running",
    )
    shutil.rmtree(work, ignore_errors=True)
    try:
        rates = json.loads(output.strip().splitlines()[-1])
        return {"append_mb_s": float(rates["append_mb_s"]), "write_crc_mb_s": float(rates["write_crc_mb_s"])}
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        raise KafkaUnavailable(f"KafkaAppend printed no rates: {output[-500:]!r}") from exc


def _run(command: list[str], timeout_s: float, doing: str) -> str:
    """`command`'s standard output; `KafkaUnavailable` with the end of its error output if it fails or hangs."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise KafkaUnavailable(f"{doing} KafkaAppend took over {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise KafkaUnavailable(f"{doing} KafkaAppend failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout
