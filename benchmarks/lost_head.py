"""A raybroker cluster of `ray start` nodes on this machine whose Ray head is lost as a machine is: what the head-loss
test (`tests/cluster/test_head_restart.py`) and benchmark (`benchmarks/bench_head_loss.py`) share.

The head is started by `raybroker start` (its GCS state kept in RocksDB) with `TMPDIR` set to a folder of its own, so
that its state file and Ray's session folders are the caller's; `cli_environment` is that environment. A worker node
joins with `ray start --address` and the reconnect timeout `cluster.gcs_storage.WORKER_ENVIRONMENT` sets
(`ray_environment`), and `WORKER_BROKER`, run by this interpreter, starts a broker and its Kafka listener on it.

A head is lost as a machine is: SIGKILL (`kill_all`) to its daemons (what ran once `raybroker start` had started
it: gcs_server, raylet, the monitors, its first actors) and to every process its raylet started since
(`head_processes`). `session_processes` finds every process of the cluster, for the caller to end what is left.
`started_head` reads the head's address and node from what `raybroker start` printed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path

import psutil

from cluster.gcs_storage import WORKER_ENVIRONMENT
from cluster.runtime import RAY_HEAD_PORT

# The Ray variables a driver's own Ray session sets; a reader's shell has none, and with them the CLI would attach
# to the driver's Ray instead of finding the head `raybroker start` started.
SESSION_RAY_VARIABLES = {"RAY_ADDRESS", "RAY_AUTH_MODE"}
# How long `kill_all` waits for the killed processes to end.
KILL_TIMEOUT_S = 10.0

# Starts a broker on a worker node (`start_broker` in a task pinned there, as `raybroker start` runs on each node)
# and a Kafka listener beside it. Arguments: the head's address, the broker's log dir, its listener's port, its
# `node.id`, its other properties as `key=value` words, then `--` and the Ray node ids it must not take (the head,
# earlier workers); it takes an alive node that is none of them. Prints the node's Ray id and the listener's
# bootstrap servers.
WORKER_BROKER = textwrap.dedent(
    """
    import sys
    import ray
    ray.init(address=sys.argv[1], namespace="raybroker", logging_level="ERROR", log_to_driver=False)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from actors.clients.broker import start_broker
    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig
    split = sys.argv.index("--")
    excluded = set(sys.argv[split + 1:])
    worker = next(node["NodeID"] for node in ray.nodes() if node["Alive"] and node["NodeID"] not in excluded)
    properties = {
        "log.dirs": sys.argv[2],
        "listeners": f"PLAINTEXT://127.0.0.1:{sys.argv[3]}",
        "node.id": sys.argv[4],
        **dict(word.split("=", 1) for word in sys.argv[5:split]),
    }
    pinned = NodeAffinitySchedulingStrategy(node_id=worker, soft=False)
    ray.get(ray.remote(num_cpus=0)(start_broker).options(scheduling_strategy=pinned).remote(properties))
    print(worker, start_kafka_listeners(BrokerConfig.from_properties(properties), worker).bootstrap_servers)
    """
)


def shell_environment() -> dict[str, str]:
    """This environment as a reader's shell has it for `raybroker` and `ray` commands: this interpreter's scripts
    first on PATH, without `SESSION_RAY_VARIABLES`, so the CLI finds the head `raybroker start` started."""
    env = {key: value for key, value in os.environ.items() if key not in SESSION_RAY_VARIABLES}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def head_port_taken() -> bool:
    """Whether something listens on Ray's default port, which `raybroker start` takes for its head."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", RAY_HEAD_PORT)) == 0


def started_head(output: str) -> tuple[str, str]:
    """The head's address and its broker's Ray node id, as `raybroker start` prints them."""
    lines = output.splitlines()
    address = next(line.split(" at ")[1].split()[0] for line in lines if "Ray head at" in line)
    node = next(line.split()[5].rstrip(",") for line in lines if "Broker running" in line)
    return address, node


def cli_environment(root: Path) -> dict[str, str]:
    """`shell_environment` for a cluster kept under `root` (its `TMPDIR`)."""
    return {**shell_environment(), "TMPDIR": str(root)}


def ray_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` for `ray start --address` of a worker node and for a driver attaching to the cluster: the workers'
    reconnect timeout, and the token authentication `raybroker start` turns on."""
    return {**env, **WORKER_ENVIRONMENT, "RAY_AUTH_MODE": "token", "RAY_LOG_TO_DRIVER": "0"}


def worker_node_command(address: str) -> list[str]:
    """`ray start` of a worker node joining the head at `address`: one CPU, a small object store."""
    ray = str(Path(sys.executable).parent / "ray")
    return [ray, "start", f"--address={address}", "--num-cpus=1", "--object-store-memory=134217728"]


def session_processes(root: Path, nodes: set[str]) -> list[psutil.Process]:
    """Every process of the cluster kept under `root`: those whose command line names `root` (its session folder)
    or one of `nodes` (Ray node ids), and the Ray client server of a head on Ray's default port (which names
    neither; the port was free when the cluster began)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(proc.info["cmdline"] or ())
            client_server = "ray.util.client.server" in cmdline and f":{RAY_HEAD_PORT} " in f"{cmdline} "
            if str(root) in cmdline or client_server or any(node in cmdline for node in nodes):
                found.append(proc)
    return found


def head_processes(daemons: list[psutil.Process]) -> list[psutil.Process]:
    """The head's processes: its `daemons` still running and everything its raylet started since."""
    lost = {proc.pid: proc for proc in daemons if proc.is_running()}
    for raylet in [proc for proc in daemons if proc.name() == "raylet"]:
        with contextlib.suppress(psutil.Error):
            lost.update({child.pid: child for child in raylet.children(recursive=True)})
    return list(lost.values())


def kill_all(processes: list[psutil.Process]) -> None:
    """SIGKILL to each, as a machine that is lost stops them; returns once none runs. A process that died counts as
    gone while it waits to be reaped (a zombie holds no port, file or memory): its parent is gone too, and how soon an
    orphan is reaped is the container's init's affair, not the cluster's (up to ~2 s here)."""
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + KILL_TIMEOUT_S
    while any(_running(proc) for proc in processes) and time.monotonic() < deadline:
        time.sleep(0.01)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
