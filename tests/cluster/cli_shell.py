"""Running the command line as a reader's shell does, for the tests that start a Ray head with `raybroker start`:
this interpreter's scripts first on PATH, and none of the Ray variables this test session's Ray set."""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks.lost_head import head_port_taken, shell_environment
from tests.conftest import skip_or_fail

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 300


# This environment as a reader's shell has it: the CLI finds the head `raybroker start` started.
cli_env = shell_environment


def run_shell(
    script: str, timeout_s: float = CLI_TIMEOUT_S, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-eu", "-c", script],
        cwd=REPO_ROOT,
        env=cli_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def require_free_head_port() -> None:
    """`raybroker start` takes Ray's default port: fails (or skips, outside CI) when another head holds it."""
    from cluster.runtime import RAY_HEAD_PORT

    if head_port_taken():
        skip_or_fail(f"port {RAY_HEAD_PORT} is taken: another Ray head runs on this machine")
