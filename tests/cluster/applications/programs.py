"""One program of the real-application tests running as a subprocess: a Java application or a Python script in an
environment of its own (`java_programs`, `python_programs` start them).

`ProgramProcess` runs its command in a session of its own with stdout and stderr in `log_path`, and stops it: SIGTERM,
or SIGKILL when asked, as a crash is. It signals only the process it started.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

STOP_TIMEOUT_S = 15


class ProgramProcess:
    """One program as a subprocess (see the module docstring)."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed by `stop`
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        """What the program printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout_s: float) -> int:
        """The exit code, waiting up to `timeout_s` (`subprocess.TimeoutExpired` after)."""
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown hook runs, nothing is flushed, committed or aborted."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after `STOP_TIMEOUT_S`; closes the log; the exit code. Safe to call again."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        return self.process.returncode
