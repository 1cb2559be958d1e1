"""Java programs of the benchmarks, compiled at run time: `compile_java` fetches the jars of the given Maven artifacts
(`benchmarks.kafka_broker.artifact_jars`, cached), compiles one source file into the run's scratch folder and answers
the classpath that runs it. A machine without a JDK, without the jars, or whose javac refuses the source raises
`KafkaUnavailable` with the reason, which the run reports as that benchmark's failure. `compile_against` compiles
against jars found otherwise (OMB's, `benchmarks.omb_build`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from benchmarks.common import BenchContext
from benchmarks.kafka_broker import KafkaUnavailable, artifact_jars

COMPILE_TIMEOUT_S = 180.0


def compile_java(ctx: BenchContext, source: Path, artifacts: list[tuple[str, str, str]], what: str) -> str:
    """The classpath running `source` compiled against `artifacts` (group, artifact, version) into the scratch folder
    `<source stem>-classes`; `what` names what needs it in the error of a machine without a JDK."""
    require_jdk(what)
    jars = list(dict.fromkeys(jar for group in artifacts for jar in artifact_jars(*group)))
    return compile_against(ctx, source, jars)


def require_jdk(what: str) -> None:
    """`KafkaUnavailable` naming `what` on a machine without javac and java."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise KafkaUnavailable(f"a JDK (javac and java) is needed to run {what}")


def compile_against(ctx: BenchContext, source: Path, jars: list[Path]) -> str:
    """The classpath running `source` compiled against `jars` into the scratch folder `<source stem>-classes`
    (`require_jdk` first)."""
    classes = ctx.scratch(f"{source.stem}-classes")
    classpath = os.pathsep.join(str(jar) for jar in jars)
    done = subprocess.run(
        ["javac", "-nowarn", "-cp", classpath, "-d", str(classes), str(source)],
        capture_output=True,
        text=True,
        timeout=COMPILE_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise KafkaUnavailable(f"javac {source.name} failed:\n{done.stderr[-2000:]}")
    return os.pathsep.join([str(classes), classpath])
