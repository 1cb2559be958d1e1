"""Java programs of the real-application tests: compiled with `javac` at test time against jars fetched from Maven
Central into the download cache (`benchmarks.kafka_broker.artifact_jars`), then run as subprocesses.

`java_classpath(artifacts, sources, folder)` compiles `sources` (file name -> Java source) into `folder` and
answers the classpath to run them with (with no sources, `folder` and the jars: a program the artifacts ship, resources
put in `folder`); a machine without a JDK or without the jars fails under `.ci/run` and
skips elsewhere (`skip_or_fail`). `JavaProcess` runs one program in a session of its own and stops it (SIGTERM, or
SIGKILL when asked, as a crash is), killing only the process it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from benchmarks.kafka_broker import KafkaUnavailable, artifact_jars
from tests.conftest import skip_or_fail

COMPILE_TIMEOUT_S = 180
STOP_TIMEOUT_S = 15
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


class JavaProcess:
    """One Java program running as a subprocess (see the module docstring); its output goes to `log_path`."""

    def __init__(self, classpath: str, main_class: str, arguments: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed by `stop`
        self.process = subprocess.Popen(
            ["java", HEAP, "-cp", classpath, main_class, *arguments],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        """What the program printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout_s: float) -> int:
        """The exit code, waiting up to `timeout_s` (`subprocess.TimeoutExpired` after)."""
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown hook runs, nothing is flushed or committed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after `STOP_TIMEOUT_S`; closes the log. Safe to call again."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
