"""Python programs of the real-application tests whose packages cannot join the project's environment: quixstreams
3.28 caps confluent-kafka below 2.13, and pyproject.toml pins 2.16.1. Such a program runs as a subprocess with the
interpreter of a virtual environment of its own, made on first use under `python/<name>` of the download cache
(`cluster.downloads`) with exactly pinned requirements, then reused; a machine where it cannot be made fails under
`.ci/run` and skips elsewhere (`skip_or_fail`).

`python_environment(name, requirements)` answers that environment's interpreter; `PythonProcess` runs one script
(`programs.ProgramProcess`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from cluster.downloads import cache_root
from tests.cluster.applications.programs import ProgramProcess
from tests.conftest import skip_or_fail

# A fresh environment takes ~20 s to make here (venv, then pip resolving and fetching ~40 wheels).
INSTALL_TIMEOUT_S = 600


def python_environment(name: str, requirements: list[str]) -> Path:
    """The interpreter of environment `name` holding exactly `requirements` (see the module docstring); made again
    when the requirements changed."""
    home = cache_root() / "python" / name
    marker = home / "complete"
    wanted = "".join(f"{requirement}\n" for requirement in requirements)
    if not marker.exists() or marker.read_text() != wanted:
        shutil.rmtree(home, ignore_errors=True)
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", str(home)], check=True, capture_output=True, timeout=INSTALL_TIMEOUT_S
            )
            subprocess.run(
                [str(home / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", *requirements],
                check=True,
                capture_output=True,
                timeout=INSTALL_TIMEOUT_S,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            output = exc.stderr.decode(errors="replace")[-2000:] if exc.stderr else ""
            skip_or_fail(f"could not make the Python environment {home} of {requirements}: {exc}\n{output}")
        marker.write_text(wanted)
    return home / "bin" / "python"


class PythonProcess(ProgramProcess):
    """One Python script running as a subprocess (`programs.ProgramProcess`); its output goes to `log_path`."""

    def __init__(self, python: Path, script: Path, arguments: list[str], log_path: Path) -> None:
        super().__init__([str(python), str(script), *arguments], log_path)
