"""Starting, attaching to and stopping the Ray cluster raybroker runs on.

Three ways in:

1. `connect_to_cluster(address)`, for the command line: attaches to a running cluster, named by `--address
   HOST:PORT` (its GCS) or `--address auto`, else `$RAY_ADDRESS`, else the head `raybroker start` recorded on this
   machine (`cluster.head_state`). It never guesses: Ray's `auto` attaches to whatever cluster this machine last
   started (another program's included), so without any of these it is a `BrokerNotAvailableError`. Ray's own
   `ray.init` waits minutes for a GCS that is not there (measured: > 2 min against a closed port), so the address
   is first probed with a plain TCP connect (`PROBE_TIMEOUT_S`), and a missing cluster fails at once.
2. `start_head()` starts a local Ray head as a background daemon (`ray start --head`) for `raybroker start`, and
   says which head that was: read from the command line of the gcs_server on port 6379, not from Ray's
   `ray_current_cluster` file, which other Ray programs rewrite and delete. `stop_head(state)` stops that head
   again without `ray stop`, which kills every Ray process of the machine, other programs' clusters included:
   it terminates only the processes whose command line names the head's session or node id, and their
   children, in `ray stop`'s order (raylet first, gcs_server last), then clears `ray_current_cluster` if it
   still points at that head.
3. `ensure_ray()` with no address starts an embedded Ray inside this process (the demo, tests).

Token authentication (Ray 2.60, `RAY_AUTH_MODE`): an embedded cluster has it on by default (Ray's own default for
a new local `ray.init()`), and so does a head `start_head()` starts; both first make sure a token exists, readable
by its owner only (`cluster.ray_auth.ensure_auth_token`). Every process that attaches to that head by address needs
`RAY_AUTH_MODE=token` and the same token (in `~/.ray/auth_token`, `RAY_AUTH_TOKEN` or `RAY_AUTH_TOKEN_PATH`);
`RAY_AUTH_MODE=disabled` opts out. For the head
recorded by `raybroker start`, the command line sets `RAY_AUTH_MODE=token` itself before it imports Ray
(`cluster.head_state.settle_ray_auth_mode`: Ray reads the variable once, at import); for any other cluster the
user does, as Ray documents.

Every path sets `RAY_LOG_TO_DRIVER=0` before Ray starts and passes `log_to_driver=False`: with log forwarding on,
Spark's Python workers (which call `ray.init` themselves) feed their own output back in a loop that grew a worker
log to 213 MB in a minute. The embedded cluster declares 4 logical CPUs whatever the machine's cores, so
that RayDP's executor (2 of them) still leaves CPUs for tasks; raybroker's own actors ask for none.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import ray
from ray._common.utils import get_ray_address_file

from actors.options import NAMESPACE
from cluster.gcs_storage import GcsStorage
from cluster.head_state import HeadState, read_state
from cluster.ray_auth import ensure_auth_token, token_auth_disabled
from storage.errors import BrokerNotAvailableError

EMBEDDED_NUM_CPUS = 4
NO_CLUSTER_NAMED = (
    "no raybroker head recorded here; start one with `raybroker start` or name the cluster with --address"
)
# `ray start --head` without --port (as `start_head` runs it) puts its GCS here.
RAY_HEAD_PORT = 6379
# A GCS on the same machine or LAN accepts a TCP connection in well under a second; 3 s leaves room for a
# machine with every core busy without making a typo in --address feel like a hang.
PROBE_TIMEOUT_S = 3.0
# Per process group of `stop_head` (raylet, the other daemons, gcs_server): SIGTERM, then SIGKILL after this
# long. All three groups of an idle head were gone within 6.6 s here.
STOP_GRACE_S = 10.0
KILL_WAIT_S = 2.0


def _quiet_environment() -> None:
    os.environ["RAY_LOG_TO_DRIVER"] = "0"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def ensure_ray(address: str | None = None, *, num_cpus: int = EMBEDDED_NUM_CPUS) -> bool:
    """Connects this process to Ray; returns True if it started an embedded cluster (to shut down later).

    With `address` (or `RAY_ADDRESS`) it attaches, and a missing cluster is `BrokerNotAvailableError`.
    """
    _quiet_environment()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        try:
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise BrokerNotAvailableError(f"no Ray cluster at {address!r}: {exc}") from None
        return False
    ensure_auth_token()
    # "local": always a new cluster, never one another process recorded in /tmp/ray/ray_current_cluster.
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        namespace=NAMESPACE,
        logging_level=logging.ERROR,
        log_to_driver=False,
    )
    return True


def gcs_address() -> str:
    """The GCS address of the Ray cluster this process is attached to."""
    return str(ray.get_runtime_context().gcs_address)


def session_name() -> str:
    """The Ray session name of the cluster this process is attached to."""
    return str(ray.get_runtime_context().get_session_name())


def is_attached() -> bool:
    return bool(ray.is_initialized())


def metrics_url(node_id: str) -> str | None:
    """Where Prometheus scrapes the metrics of Ray node `node_id` (its metrics agent), None if it serves none."""
    for node in ray.nodes():
        if node["NodeID"] == node_id and node["Alive"] and node.get("MetricsExportPort"):
            return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
    return None


# --- attaching from the command line ----------------------------------------------------------------------


def _ray_address_file() -> Path:
    """Ray's `ray_current_cluster` file: the GCS address of the last `ray start` on this machine (what
    `ray.init("auto")` tries first). Its location depends on RAY_TMPDIR/TMPDIR; `get_ray_address_file` is a
    private helper of Ray (pinned at 2.60.0)."""
    return Path(get_ray_address_file(None))


def recorded_ray_address() -> str | None:
    with contextlib.suppress(OSError):
        return _ray_address_file().read_text(encoding="utf-8").strip() or None
    return None


def probe(address: str) -> None:
    """Fails fast when nothing listens at the GCS address `ray.init(address)` would wait for."""
    target: str | None = address
    if address == "auto":
        target = os.environ.get("RAY_ADDRESS") or recorded_ray_address()
    if not target or target in ("auto", "local") or "://" in target:
        # Ray resolves these itself, and answers at once when no cluster runs on this machine.
        return
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise BrokerNotAvailableError(f"bad Ray address {target!r}: expected HOST:PORT of the cluster's GCS")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise BrokerNotAvailableError(
            f"no Ray cluster at {target} ({reason}); start one with `raybroker start`"
        ) from None


def reachable(address: str) -> bool:
    try:
        probe(address)
    except BrokerNotAvailableError:
        return False
    return True


def connect_to_cluster(address: str | None) -> None:
    """Attaches this process to the cluster at `address` (see the module docstring); a no-op when attached."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        own = read_state()
        if own is None or not own.started_head:
            raise BrokerNotAvailableError(NO_CLUSTER_NAMED)
        address = own.address
    probe(address)
    ensure_ray(address)


# --- a local head daemon ----------------------------------------------------------------------------------


def _ray_command(*args: str) -> list[str]:
    executable = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if executable is None:
        raise BrokerNotAvailableError("the `ray` command is not installed next to this Python")
    return [executable, *args]


def start_head(
    num_cpus: int = EMBEDDED_NUM_CPUS,
    metrics_export_port: int | None = None,
    gcs_storage: GcsStorage | None = None,
) -> HeadState:
    """Starts a local Ray head daemon (the processes outlive this command), with token authentication on
    unless `RAY_AUTH_MODE` says otherwise; returns which head it started. Its metrics agent serves Prometheus on
    `metrics_export_port` (None: a free port Ray picks); its GCS keeps the cluster's state in `gcs_storage`
    (`cluster.gcs_storage`; None: in memory only), so that the head started again there resumes the cluster."""
    _quiet_environment()
    # Ray 2.60's `ray start --head` in token mode refuses to start without a token, and without the mode it turns
    # authentication on only where a token exists (otherwise it starts an open cluster that runs any code it is
    # sent). Creating the token first keeps the head closed either way; `RAY_AUTH_MODE=disabled` opts out.
    token_auth = not token_auth_disabled()
    ensure_auth_token()
    command = _ray_command(
        "start", "--head", f"--num-cpus={num_cpus}", "--include-dashboard=false", "--disable-usage-stats"
    )
    if metrics_export_port is not None:
        command.append(f"--metrics-export-port={metrics_export_port}")
    storage = gcs_storage or GcsStorage("memory")
    environment = {**os.environ, **storage.head_environment()}
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()
        raise BrokerNotAvailableError(f"`ray start --head` failed: {last[-1] if last else result.returncode}")
    return _started_head(token_auth=token_auth, gcs_storage=storage)


def _started_head(token_auth: bool, gcs_storage: GcsStorage) -> HeadState:
    """The head `ray start --head` has just started: the gcs_server on Ray's default port (a port has one owner).

    Read from its command line rather than from Ray's `ray_current_cluster` file, which any other Ray program
    on the machine may rewrite or delete meanwhile (`ray.cluster_utils.Cluster` deletes it on shutdown).
    """
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] != "gcs_server":
            continue
        flags = dict(arg.split("=", 1) for arg in proc.info["cmdline"] or () if arg.startswith("--") and "=" in arg)
        if (
            flags.get("--gcs_server_port") == str(RAY_HEAD_PORT)
            and {"--node-ip-address", "--session-name", "--node-id"} <= flags.keys()
        ):
            address = f"{flags['--node-ip-address']}:{RAY_HEAD_PORT}"
            return HeadState(
                True,
                address,
                flags["--session-name"],
                flags["--node-id"],
                token_auth,
                gcs_storage.backend,
                gcs_storage.location,
            )
    raise BrokerNotAvailableError(f"`ray start --head` succeeded, but no Ray GCS listens on port {RAY_HEAD_PORT}")


def stop_head(state: HeadState) -> None:
    """Stops the head `start_head` started, and only its processes (see the module docstring).

    This process leaves that cluster first if it is attached to it; any other Ray it is attached to stays.
    """
    if ray.is_initialized() and session_name() == state.session_name:
        ray.shutdown()
    own = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    family: dict[int, tuple[psutil.Process, str]] = {}
    for proc in psutil.process_iter(["cmdline", "name"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if proc.pid in own or (state.session_name not in cmdline and state.node_id not in cmdline):
            continue
        family[proc.pid] = (proc, proc.info["name"] or "")
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                if child.pid not in own:
                    with contextlib.suppress(psutil.Error):
                        family.setdefault(child.pid, (child, child.name()))
    # `ray stop`'s order: the raylet first (it stops its workers and agents), gcs_server last.
    groups = [
        [proc for proc, name in family.values() if name == "raylet"],
        [proc for proc, name in family.values() if name not in ("raylet", "gcs_server")],
        [proc for proc, name in family.values() if name == "gcs_server"],
    ]
    for group in groups:
        for proc in group:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(group, timeout=STOP_GRACE_S)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=KILL_WAIT_S)
    if recorded_ray_address() == state.address:
        # What `ray stop` does too, so that `auto` does not go on to find a dead head.
        with contextlib.suppress(OSError):
            _ray_address_file().unlink()
