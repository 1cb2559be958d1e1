"""Starting or attaching the Ray cluster raybroker runs on.

Three ways in, in this order:

1. an explicit address (`--address ADDR`, or `auto` for the cluster running on this machine, or the
   `RAY_ADDRESS` environment variable) attaches to a running cluster;
2. `start_head()` starts a local Ray head as a background daemon (`ray start --head`), for
   `raybroker start`; `stop_head()` stops it again (`ray stop`) for `raybroker stop`;
3. `ensure_ray()` with no address starts an embedded Ray inside this process (the demo, tests).

Token authentication (Ray 2.60, `RAY_AUTH_MODE`): an embedded cluster has it on by default (Ray's own
default for a new local `ray.init()`); `start_head()` keeps it on by creating `~/.ray/auth_token` first if no
token exists. Every process that attaches to that head by address needs `RAY_AUTH_MODE=token` and the same
token (in `~/.ray/auth_token`, `RAY_AUTH_TOKEN` or `RAY_AUTH_TOKEN_PATH`); `RAY_AUTH_MODE=disabled` opts out.

Every path sets `RAY_LOG_TO_DRIVER=0` before Ray starts and passes `log_to_driver=False`: with log
forwarding on, Spark's Python workers (which call `ray.init` themselves) feed their own output back
in a loop that grew a worker log to 213 MB in a minute here (spark-bridge.md §4, G1). The embedded
cluster declares 4 logical CPUs on this 2-core machine so that RayDP's executor (2 cores) still leaves
CPUs for tasks (§2); raybroker's own actors ask for none.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from storage.errors import BrokerNotAvailableError

EMBEDDED_NUM_CPUS = 4
NAMESPACE = "raybroker"
AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"


def _quiet_environment() -> None:
    os.environ["RAY_LOG_TO_DRIVER"] = "0"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def ensure_ray(address: str | None = None, *, num_cpus: int = EMBEDDED_NUM_CPUS) -> bool:
    """Connects this process to Ray; returns True if it started an embedded cluster (to shut down later).

    With `address` (or `RAY_ADDRESS`) it attaches, and a missing cluster is `BrokerNotAvailableError`.
    """
    _quiet_environment()
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    common = {"namespace": NAMESPACE, "logging_level": "ERROR", "log_to_driver": False}
    if address:
        try:
            ray.init(address=address, **common)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise BrokerNotAvailableError(f"no Ray cluster at {address!r}: {exc}") from None
        return False
    # "local": always a new cluster, never one another process recorded in /tmp/ray/ray_current_cluster.
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **common)
    return True


def _ray_command(*args: str) -> list[str]:
    executable = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if executable is None:
        raise BrokerNotAvailableError("the `ray` command is not installed next to this Python")
    return [executable, *args]


def start_head(num_cpus: int = EMBEDDED_NUM_CPUS) -> None:
    """Starts a local Ray head daemon (the processes outlive this command), with token authentication on
    unless `RAY_AUTH_MODE` says otherwise."""
    _quiet_environment()
    if os.environ.get(AUTH_MODE_VARIABLE) is None:
        # Ray 2.60's `ray start --head` turns token authentication on only where a token already exists
        # (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) and otherwise starts an open cluster that
        # runs any code it is sent. Creating the token first (a no-op if one exists) keeps the head closed;
        # `RAY_AUTH_MODE=disabled` opts out.
        generated = subprocess.run(
            _ray_command("get-auth-token", "--generate"), capture_output=True, text=True, check=False
        )
        if generated.returncode != 0:
            raise BrokerNotAvailableError(f"cannot create a Ray auth token: {generated.stderr.strip()[-200:]}")
    command = _ray_command(
        "start", "--head", f"--num-cpus={num_cpus}", "--include-dashboard=false", "--disable-usage-stats"
    )
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()
        raise BrokerNotAvailableError(f"`ray start --head` failed: {last[-1] if last else result.returncode}")


def stop_head() -> None:
    """Stops the Ray daemons started on this machine (`ray stop`)."""
    subprocess.run(_ray_command("stop"), capture_output=True, text=True, check=False)
