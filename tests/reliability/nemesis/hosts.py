"""A Ray cluster of hosts the nemesis can hurt: the head in this process's network namespace (at the bridge's address,
so that this process attaches to it as a driver), and worker hosts started with `ray start` inside namespaces of their
own (`tests.reliability.nemesis.network`), each with its log dirs and a broker.

What the nemesis does to a worker host:
- `kill`: SIGKILL every process of the host (raylet, agents, workers: `ip netns pids`), as a machine lost;
- `pause`/`resume`: SIGSTOP and SIGCONT every process, as a machine that stops (a VM paused, a swap storm). Paused
  longer than Ray's health deadline, the node is declared dead while its processes live on; resumed, its raylet learns
  it and exits, and its workers after it (about 2.5 s here), so a paused node comes back as a zombie for a moment;
- `pause_broker`: SIGSTOP the broker's processes only (Ray's workers, not the raylet or its agents), so Ray keeps the
  node alive and only the broker's missing heartbeats tell;
- `cut`/`heal` (through `network`): packets dropped between the host and the head (the GCS and the controller) or
  another host. Cut from the head longer than Ray's health deadline, the node is declared dead while its processes
  run on, acting on what they knew, until the heal lets the raylet learn it and exit (about 5 s after);
- `restart`: a host whose node is gone starts a new Ray node (a new node id) in the same namespace over the same log
  dirs, and its broker, as a machine back with its disks.

The head is never hurt (its loss is issue 44's: the controller and its metadata live there).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import ray
from ray.cluster_utils import Cluster

from actors.clients.broker import stop_broker
from tests.actors.support import start_broker_on
from tests.reliability.nemesis.network import Network

OBJECT_STORE_BYTES = 128 * 1024 * 1024


@dataclass
class Host:
    """A worker host: its namespace's index, its log dirs, and its Ray node while one runs."""

    index: int
    dirs: list[Path]
    node: str | None = None
    paused: list[int] = field(default_factory=list)


class Hosts:
    """The head and the worker hosts; see the module docstring."""

    def __init__(self, network: Network, root: Path, properties: dict[str, str], system_config: dict[str, Any]):
        self.network = network
        self.root = root
        self.properties = properties
        self.system_config = system_config
        self.cluster: Cluster | None = None
        self.head = ""
        self.workers = [Host(index, [root / f"host{index}-dir0"]) for index in range(network.hosts)]

    def start(self) -> Hosts:
        """Starts the head, attaches this process to it, and starts every worker host, each with its broker."""
        os.environ["RAY_LOG_TO_DRIVER"] = "0"
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "object_store_memory": OBJECT_STORE_BYTES,
                "node_ip_address": self.network.head_address,
                "include_dashboard": False,
                "_system_config": self.system_config,
            },
        )
        ray.init(address=self.cluster.address, namespace="raybroker", log_to_driver=False, logging_level="ERROR")
        self.head = ray.get_runtime_context().get_node_id()
        self._start_broker(self.head, [self.root / "head-dir0"])
        for host in self.workers:
            self.restart(host)
        return self

    def restart(self, host: Host, timeout_s: float = 90.0) -> str:
        """Starts a new Ray node in `host`'s namespace (whatever is left of its last one killed first) and its broker
        over its log dirs; returns the node id."""
        self._kill_all(host)
        assert self.cluster is not None
        before = {n["NodeID"] for n in ray.nodes()}
        address = self.network.address(host.index)
        command = [
            *self.network.command(host.index),
            "env",
            f"TMPDIR={os.environ.get('TMPDIR', '/tmp')}",
            "ray",
            "start",
            f"--address={self.cluster.address}",
            f"--node-ip-address={address}",
            "--num-cpus=1",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--disable-usage-stats",
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            fresh = [
                n["NodeID"]
                for n in ray.nodes()
                if n["Alive"] and n["NodeID"] not in before and n["NodeManagerAddress"] == address
            ]
            if fresh:
                break
            assert time.monotonic() < deadline, f"host {host.index}'s Ray node did not join within {timeout_s} s"
            time.sleep(0.2)
        host.node = fresh[0]
        self._start_broker(host.node, host.dirs)
        return host.node

    def _start_broker(self, node: str, dirs: list[Path]) -> None:
        properties = {"log.dirs": ",".join(str(d) for d in dirs), **self.properties}
        start_broker_on(node, properties)

    def alive(self, node: str | None) -> bool:
        return node is not None and any(n["NodeID"] == node and n["Alive"] for n in ray.nodes())

    def wait_dead(self, host: Host, timeout_s: float = 60.0) -> float:
        """Waits until Ray declares `host`'s node dead; returns how long that took."""
        started = time.monotonic()
        while self.alive(host.node):
            assert time.monotonic() - started < timeout_s, f"host {host.index}'s node not declared dead"
            time.sleep(0.1)
        return time.monotonic() - started

    def host_of(self, node: str) -> Host | None:
        return next((host for host in self.workers if host.node == node), None)

    def kill(self, host: Host) -> None:
        """SIGKILLs every process of `host`."""
        self._kill_all(host)

    def pause(self, host: Host) -> None:
        """SIGSTOPs every process of `host`."""
        self._stop(host, self.network.pids(host.index))

    def pause_broker(self, host: Host) -> None:
        """SIGSTOPs the broker's processes of `host` (Ray's workers), leaving the raylet and its agents running."""
        workers = []
        for pid in self.network.pids(host.index):
            with contextlib.suppress(psutil.Error):
                title = psutil.Process(pid).cmdline()
                if title and title[0].startswith("ray::"):
                    workers.append(pid)
        self._stop(host, workers)

    def _stop(self, host: Host, pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        host.paused.extend(pids)

    def resume(self, host: Host) -> None:
        """SIGCONTs what `pause` or `pause_broker` stopped."""
        for pid in host.paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        host.paused.clear()

    def _kill_all(self, host: Host) -> None:
        for pid in self.network.pids(host.index):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        host.paused.clear()

    def shutdown(self) -> None:
        """Stops the brokers, detaches, and stops every process of the hosts and the head."""
        for host in self.workers:
            self.resume(host)
            self.network.heal(host.index)
        if ray.is_initialized():
            # A broker the last fault left unreachable answers nothing: its processes are killed below.
            with contextlib.suppress(Exception):
                stop_broker()
            ray.shutdown()
        for host in self.workers:
            self._kill_all(host)
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
