"""Hosts of their own on this machine: a Linux bridge and one network namespace per worker host, joined to it by a
veth pair, so that the nemesis can cut a host off from another (or from every other) while its processes run on.

The bridge holds the first address of a private /24 and is the head host's address (the head runs in this process's
namespace, where the test attaches to Ray); each worker host gets the next address inside its namespace. Every name
carries this process's pid (`rbn<pid>...`), so that the namespaces and links of a run are told apart from another
run's, and `sweep_stale` removes those left by a run whose process is gone (a SIGKILLed test cannot clean up).

Cuts are nftables rules in a worker's namespace that drop every packet to and from the other side's address, both
ways (`cut`); `heal` deletes them. Established TCP connections then stall rather than fail, as across a real partition.
Needs root, `ip` (iproute2) and `nft` (nftables): `missing_tools` says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

# The private /24 of a run: 10.<177>.<pid % 250>.0, so that two runs at once (different pids) rarely overlap.
SUBNET_PREFIX = "10.177"
NFT_TABLE = "nemesis"
# A run's bridge (`rbn<pid>br`) and host namespaces (`rbn<pid>h<host>`).
STALE_NAME = re.compile(r"rbn(\d+)(br|h\d+)")


def missing_tools() -> list[str]:
    """The tools (or rights) this module needs and this machine lacks."""
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def _run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


@dataclass
class Network:
    """A bridge and `hosts` worker namespaces; see the module docstring."""

    hosts: int
    pid: int = field(default_factory=os.getpid)
    namespaces: list[str] = field(default_factory=list)
    _bridge_up: bool = False
    _cut: set[tuple[int, int]] = field(default_factory=set)

    @property
    def bridge(self) -> str:
        return f"rbn{self.pid}br"

    @property
    def subnet(self) -> str:
        return f"{SUBNET_PREFIX}.{self.pid % 250}"

    @property
    def head_address(self) -> str:
        return f"{self.subnet}.1"

    def address(self, host: int) -> str:
        """Worker host `host`'s address (0-based)."""
        return f"{self.subnet}.{host + 2}"

    def namespace(self, host: int) -> str:
        return f"rbn{self.pid}h{host}"

    def create(self) -> Network:
        """Makes the bridge and the hosts' namespaces (all removed by `remove`, even after a failure here)."""
        sweep_stale()
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            self._bridge_up = True
            _run("ip", "addr", "add", f"{self.head_address}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for host in range(self.hosts):
                name, outside, inside = self.namespace(host), f"rbn{self.pid}v{host}", f"rbn{self.pid}p{host}"
                _run("ip", "netns", "add", name)
                self.namespaces.append(name)
                _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
                _run("ip", "link", "set", inside, "netns", name)
                _run("ip", "link", "set", outside, "master", self.bridge)
                _run("ip", "link", "set", outside, "up")
                self.inside(host, "ip", "addr", "add", f"{self.address(host)}/24", "dev", inside)
                self.inside(host, "ip", "link", "set", inside, "up")
                self.inside(host, "ip", "link", "set", "lo", "up")
                self.inside(host, "nft", "add", "table", "inet", NFT_TABLE)
                for chain, hook in (("in", "input"), ("out", "output")):
                    rule = f"{{ type filter hook {hook} priority 0 ; }}"
                    self.inside(host, "nft", "add", "chain", "inet", NFT_TABLE, chain, rule)
        except BaseException:
            self.remove()
            raise
        return self

    def inside(self, host: int, *command: str) -> str:
        """Runs `command` in host `host`'s namespace; returns what it printed."""
        return _run("ip", "netns", "exec", self.namespace(host), *command)

    def command(self, host: int) -> list[str]:
        """The prefix that runs a command in host `host`'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def pids(self, host: int) -> list[int]:
        """Every process running in host `host`'s namespace."""
        return [int(pid) for pid in _run("ip", "netns", "pids", self.namespace(host)).split()]

    def cut(self, host: int, other: str) -> None:
        """Drops every packet between worker host `host` and address `other` (the head's, or another host's)."""
        self.inside(host, "nft", "add", "rule", "inet", NFT_TABLE, "in", "ip", "saddr", other, "drop")
        self.inside(host, "nft", "add", "rule", "inet", NFT_TABLE, "out", "ip", "daddr", other, "drop")

    def heal(self, host: int) -> None:
        """Removes every cut of host `host`."""
        for chain in ("in", "out"):
            self.inside(host, "nft", "flush", "chain", "inet", NFT_TABLE, chain)

    def remove(self) -> None:
        """Kills what still runs in the namespaces (processes started there, by pid), deletes them and the bridge."""
        for host, name in enumerate(list(self.namespaces)):
            with contextlib.suppress(subprocess.CalledProcessError):
                for pid in self.pids(host):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, 9)
            with contextlib.suppress(subprocess.CalledProcessError):
                _run("ip", "netns", "del", name)
            self.namespaces.remove(name)
        if self._bridge_up:
            with contextlib.suppress(subprocess.CalledProcessError):
                _run("ip", "link", "del", self.bridge)
            self._bridge_up = False


def sweep_stale() -> list[str]:
    """Removes namespaces and bridges of earlier runs whose process is gone (the pid in their name runs no more);
    returns their names. Veth pairs go with their namespace."""
    removed = []
    namespaces = [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()]
    links = [line.split(":")[1].strip().split("@")[0] for line in _run("ip", "-o", "link").splitlines()]
    for name in namespaces + links:
        match = STALE_NAME.fullmatch(name)
        if match is None or os.path.exists(f"/proc/{match.group(1)}"):
            continue
        if match.group(2) == "br":
            with contextlib.suppress(subprocess.CalledProcessError):
                _run("ip", "link", "del", name)
        elif name in namespaces:
            with contextlib.suppress(subprocess.CalledProcessError):
                for pid in _run("ip", "netns", "pids", name).split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), 9)
                _run("ip", "netns", "del", name)
        else:
            continue
        removed.append(name)
    return removed
