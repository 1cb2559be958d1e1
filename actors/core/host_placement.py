"""Which partition host of a node holds each partition, where a new partition goes, and which hosts are started
ahead as spares (`log.partitions.per.process` > 1, `log.partitions.spare.processes`).

A partition host is an actor process holding up to `per_process` partition logs (`actors.server.partition_host`);
starting one measured ~1-1.5 s of CPU, opening a partition in a running one a call. So that a new
partition never waits for a process to start, the placement keeps `spare_processes` hosts that hold no partition
started beside the others:

- a partition goes to the host already holding it (a reopen), else to the lowest-numbered host with room, else to
  a new host; spares are the highest-numbered hosts, so they are used only once every other host is full;
- after each placement, and once the hosts found running are known (`start_spares`), new hosts are started until
  `spare_processes` of them hold nothing; a host emptied by deletes counts as a spare and keeps running;
- hosts are numbered from 0 in start order, and the numbers are never reused: a restarted log manager finds its
  hosts again by name, index by index, until one is missing.

Starting a host (`start_host`) only asks for the process and returns its handle at once; a partition placed in a
host still starting waits, in its `open_partition` call, until the host is up. This class holds no lock: its one
user, `actors.server.ray_partitions.RayPartitions`, serializes every call under its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from storage.topic_partition import TopicPartition

H = TypeVar("H")


@dataclass(slots=True)
class PlacedHost(Generic[H]):
    """A partition host: its name, its handle and its partitions' folders ("" for a partition found held by a
    running host and not yet matched to a folder on disk)."""

    name: str
    handle: H
    partitions: dict[TopicPartition, str]


class HostPlacement(Generic[H]):
    """The partition hosts of one node and the partitions each holds; see the module docstring."""

    def __init__(
        self,
        per_process: int,
        spare_processes: int,
        start_host: Callable[[int], PlacedHost[H]],
        running: list[PlacedHost[H]] | None = None,
    ) -> None:
        """`start_host(index)` starts host number `index` (holding nothing) and returns it; `running` are the hosts
        found running, numbered from 0."""
        if per_process < 2:
            raise ValueError(f"partition hosts hold at least 2 partitions, not {per_process}")
        if spare_processes < 0:
            raise ValueError(f"spare_processes must be >= 0, not {spare_processes}")
        self.per_process = per_process
        self.spare_processes = spare_processes
        self._start_host = start_host
        self._hosts: list[PlacedHost[H]] = list(running or [])

    @property
    def hosts(self) -> list[PlacedHost[H]]:
        """Every host, in index order (a copy of the list)."""
        return list(self._hosts)

    def holding(self, tp: TopicPartition) -> PlacedHost[H] | None:
        """The host holding `tp`, None if none does."""
        return next((host for host in self._hosts if tp in host.partitions), None)

    def named(self, name: str) -> PlacedHost[H] | None:
        return next((host for host in self._hosts if host.name == name), None)

    def spares(self) -> list[PlacedHost[H]]:
        """The hosts holding no partition."""
        return [host for host in self._hosts if not host.partitions]

    def place(self, tp: TopicPartition, folder: str) -> PlacedHost[H]:
        """The host `tp` opens in: the one holding it, else the lowest-numbered with room, else a new one; `tp`
        is recorded there with `folder`, and spares are started to replace a spare it took."""
        host = self.holding(tp) or next((h for h in self._hosts if len(h.partitions) < self.per_process), None)
        if host is None:
            host = self._start()
        host.partitions[tp] = folder
        self.start_spares()
        return host

    def remove(self, tp: TopicPartition) -> list[PlacedHost[H]]:
        """Forgets `tp`; returns the hosts that held it (the caller closes it there)."""
        held = [host for host in self._hosts if tp in host.partitions]
        for host in held:
            del host.partitions[tp]
        return held

    def start_spares(self) -> list[PlacedHost[H]]:
        """Starts hosts until `spare_processes` of them hold no partition; returns the hosts it started."""
        return [self._start() for _ in range(self.spare_processes - len(self.spares()))]

    def take_all(self) -> list[PlacedHost[H]]:
        """Every host, forgotten here (the caller stops them)."""
        hosts, self._hosts = self._hosts, []
        return hosts

    def _start(self) -> PlacedHost[H]:
        host = self._start_host(len(self._hosts))
        self._hosts.append(host)
        return host
