"""Go programs of the protocol tests: the packages of the Go module in `go/` (its `go.mod` and `go.sum` pin every
module and its hash), built with the machine's `go` at test time and run as subprocesses
(`tests.cluster.applications.programs.ProgramProcess`).

`go_program(package, output)` builds one package of that module (`"./consumergroupmember"`) into `output`. The go
command's module cache, build cache and GOPATH are `$RAYBROKER_CACHE/go/{mod,build,path}` (`cluster.downloads`), so a
run with an empty HOME, as CI's, fetches the modules from the Go module proxy once and compiles them once (about a
minute on 2 cores; a second build of the same sources takes about a second). `GOTOOLCHAIN=local`: the machine's Go
builds it or nothing does, no other toolchain is fetched. A machine without Go (at least the version `go.mod`
names) or without the module proxy fails under `.ci/run` and skips elsewhere (`skip_or_fail`); a program that does
not compile, or a module whose hash is not `go.sum`'s, fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cluster.downloads import cache_root
from tests.conftest import skip_or_fail

MODULE = Path(__file__).parent / "go"
# The first fetch and compile of franz-go and its compression libraries took 50 s on an idle 2-core machine; the
# suite runs other tests beside it.
BUILD_TIMEOUT_S = 300
# What `go` prints when it cannot reach the module proxy (or reaches no network at all), and when it is older than
# the module's `go` line: an outside part missing, not a fault of the program.
UNREACHABLE = re.compile(
    r"dial tcp|no such host|connection refused|i/o timeout|TLS handshake|network is unreachable|proxyconnect"
    r"|Client\.Timeout|server misbehaving|unexpected EOF"
)
TOO_OLD = re.compile(r"requires go >= |go\.mod requires go")


def go_environment() -> dict[str, str]:
    """The environment the go command runs in: the caches under the download cache (see the module docstring)."""
    folder = cache_root() / "go"
    return {
        **os.environ,
        "GOMODCACHE": str(folder / "mod"),
        "GOCACHE": str(folder / "build"),
        "GOPATH": str(folder / "path"),
        "GOTOOLCHAIN": "local",
    }


def run_go(arguments: list[str], what: str) -> None:
    """Runs `go arguments` in the module; a missing outside part skips or fails (`skip_or_fail`), anything else
    fails the test with the go command's output."""
    try:
        done = subprocess.run(
            ["go", *arguments],
            cwd=MODULE,
            env=go_environment(),
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        skip_or_fail(f"{what} took more than {BUILD_TIMEOUT_S} s (go {' '.join(arguments)})")
    if done.returncode == 0:
        return
    output = (done.stdout + done.stderr)[-3000:]
    if TOO_OLD.search(output):
        skip_or_fail(f"this machine's Go is older than {MODULE / 'go.mod'} needs: {output}")
    if UNREACHABLE.search(output):
        skip_or_fail(f"the Go module proxy is not reachable for {what}: {output}")
    pytest.fail(f"{what} failed (go {' '.join(arguments)}):\n{output}", pytrace=False)


def go_program(package: str, output: Path) -> Path:
    """Builds `package` of the module (see the module docstring) into the executable `output`; its path."""
    if shutil.which("go") is None:
        skip_or_fail("no Go toolchain (go) on this machine")
    run_go(["mod", "download"], "fetching the Go modules")
    output.parent.mkdir(parents=True, exist_ok=True)
    run_go(
        ["build", "-mod=readonly", "-buildvcs=false", "-trimpath", "-o", str(output), package],
        f"building {package}",
    )
    return output
