"""Java programs of the real-application tests: compiled with `javac` at test time against jars fetched from Maven
Central into the download cache (`benchmarks.kafka_broker.artifact_jars`), then run as subprocesses.

`java_classpath(artifacts, sources, folder)` compiles `sources` (file name -> Java source) into `folder` and
answers the classpath to run them with (with no sources, `folder` and the jars: a program the artifacts ship,
resources put in `folder`); a machine without a JDK or without the jars fails under `.ci/run` and skips elsewhere
(`skip_or_fail`). `JavaProcess` runs one program (`programs.ProgramProcess`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from benchmarks.kafka_broker import KafkaUnavailable, artifact_jars
from tests.cluster.applications.programs import ProgramProcess
from tests.conftest import skip_or_fail

COMPILE_TIMEOUT_S = 180
# Kafka's clients log through slf4j; the tests read the programs' stdout, and their stderr when they fail.
HEAP = "-Xmx384m"


def java_classpath(artifacts: list[tuple[str, str, str]], sources: dict[str, str], folder: Path) -> str:
    """Compiles `sources` against the jars of `artifacts` (group, artifact, version) into `folder`; the classpath
    that runs them (see the module docstring)."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        skip_or_fail("no JDK (javac, java) on this machine")
    jars: list[Path] = []
    try:
        for group, artifact, version in artifacts:
            jars.extend(artifact_jars(group, artifact, version))
    except KafkaUnavailable as exc:
        skip_or_fail(f"the Java programs' jars are not available: {exc}")
    folder.mkdir(parents=True, exist_ok=True)
    unique = list(dict.fromkeys(str(jar) for jar in jars))
    classpath = os.pathsep.join(unique)
    paths = []
    for name, text in sources.items():
        path = folder / name
        path.write_text(text)
        paths.append(str(path))
    if paths:
        subprocess.run(
            ["javac", "-nowarn", "-cp", classpath, "-d", str(folder), *paths],
            check=True,
            capture_output=True,
            timeout=COMPILE_TIMEOUT_S,
        )
    return os.pathsep.join([str(folder), classpath])


class JavaProcess(ProgramProcess):
    """One Java program running as a subprocess (`programs.ProgramProcess`); its output goes to `log_path`."""

    def __init__(self, classpath: str, main_class: str, arguments: list[str], log_path: Path) -> None:
        super().__init__(["java", HEAP, "-cp", classpath, main_class, *arguments], log_path)
