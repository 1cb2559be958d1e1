"""Shared tools of the broker half of the reliability suite: one broker shared by its modules, SIGKILL a Ray
actor's process and wait for Ray to restart it, read a partition back, record what a producer got
acknowledged, the log-versus-acknowledgements oracle (`check_log_holds`), and a process's RSS, open file
descriptors and memory mappings from /proc.

The figures are only measured here; the tests decide what they must be.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.calls import call
from actors.clients.broker import Broker
from storage.errors import BrokerNotAvailableError, RequestTimedOutError
from storage.records.record_batch import RecordBatchBuilder, iter_batches
from tests.actors.support import wait_for
from tests.conftest import ONE_ACTOR_PER_PARTITION

# A restarted actor starts a fresh Python worker and recovers its log: seconds with every core busy.
RESTART_TIMEOUT_S = 90.0
READ_CHUNK_BYTES = 1 << 20


_shared_broker: list[Broker] = []


def shared_broker(start_test_broker: Callable[..., tuple[Broker, list[Path]]]) -> Broker:
    """The broker the previous module of this suite started, if it still runs (starting one costs seconds on
    a loaded node), else a new one over two fresh log dirs. Each test uses topics of its own."""
    if _shared_broker:
        try:
            call(_shared_broker[0].controller.list_topics.remote(), timeout_s=30)
            return _shared_broker[0]
        except (BrokerNotAvailableError, RequestTimedOutError):
            _shared_broker.clear()
    client, _ = start_test_broker(log_dirs_count=2, **ONE_ACTOR_PER_PARTITION)
    _shared_broker.append(client)
    return client


def alive_pid(handle: Any) -> int | None:
    """The pid of the actor's process while Ray reports it ALIVE, from the GCS actor table (the public state
    API needs the dashboard, which the test session turns off); None while it is dead or restarting.

    Asked of the GCS rather than of the actor: a call sent to a process that was just killed may hang until
    its timeout, which would make every restart look seconds slower than it is.
    """
    import ray

    entry = ray._private.state.actors(actor_id=handle._actor_id.hex())
    return entry["Pid"] if entry.get("State") == "ALIVE" else None


def sigkill_and_wait(handle: Any, delay_s: float = 0.0, ready: str = "ping") -> tuple[int, int]:
    """SIGKILLs the actor's process (`delay_s` after finding it), waits until Ray reports a new process ALIVE,
    then until that process answers `ready` (a partition's `ready`: its log is open); returns (old pid,
    new pid)."""
    wait_for(lambda: alive_pid(handle) is not None, RESTART_TIMEOUT_S, "the actor to be alive before the kill")
    old = alive_pid(handle)
    assert old is not None, "the actor died between two lookups"
    time.sleep(delay_s)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: alive_pid(handle) not in (None, old), RESTART_TIMEOUT_S, f"a new process after killing {old}")
    new = alive_pid(handle)
    assert new is not None
    wait_for(lambda: answers(handle, ready), RESTART_TIMEOUT_S, f"process {new} to answer {ready}")
    return old, new


def answers(handle: Any, method: str) -> bool:
    """Whether the actor answers `method`. A caller may still see the actor restarting for a moment after the
    GCS reports it ALIVE again (the state reaches it asynchronously): its calls then fail at once."""
    try:
        call(getattr(handle, method).remote(), timeout_s=RESTART_TIMEOUT_S)
    except BrokerNotAvailableError:
        return False
    return True


def read_partition(handle: Any, start: int = 0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record from `start` to the high watermark, in log order."""
    end = call(handle.offsets.remote(), timeout_s=60)[1]
    out: list[tuple[int, bytes | None]] = []
    offset = start
    while offset < end:
        batches = list(iter_batches(call(handle.read.remote(offset, READ_CHUNK_BYTES), timeout_s=60)))
        assert batches, f"no batch returned at offset {offset} below the high watermark {end}"
        for batch in batches:
            out.extend((record.offset, record.value) for record in batch.records() if offset <= record.offset < end)
        offset = batches[-1].next_offset
    return out


def raw_append(handle: Any, value: bytes) -> int:
    """Appends one record without producer id through the raw handle; returns its offset."""
    builder = RecordBatchBuilder()
    builder.append(None, value, timestamp=int(time.time() * 1000))
    return call(handle.append.remote(builder.build()), timeout_s=60).first_offset


@dataclass
class Acknowledgements:
    """What a producer got acknowledged, as its futures resolve: per partition, (offset, value) in send order."""

    sent: int = 0
    failures: list[BaseException] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # send index -> (partition, offset, value), for every acknowledged record
    _acked: dict[int, tuple[int, int, bytes]] = field(default_factory=dict)

    def track(self, future: Future[Any], value: bytes) -> None:
        with self._lock:
            index = self.sent
            self.sent += 1
        future.add_done_callback(lambda done: self._done(index, done, value))

    def _done(self, index: int, future: Future[Any], value: bytes) -> None:
        with self._lock:
            error = future.exception()
            if error is not None:
                self.failures.append(error)
                return
            metadata = future.result()
            self._acked[index] = (metadata.partition, metadata.offset, value)

    def count(self) -> int:
        with self._lock:
            return len(self._acked)

    def snapshot(self) -> dict[int, dict[int, bytes]]:
        """Per partition, acknowledged offset -> value."""
        with self._lock:
            acked: dict[int, dict[int, bytes]] = {}
            for partition, offset, value in self._acked.values():
                acked.setdefault(partition, {})[offset] = value
            return acked

    def in_send_order(self) -> dict[int, list[tuple[int, bytes]]]:
        """Per partition, (offset, value) in the order the records were sent."""
        with self._lock:
            ordered: dict[int, list[tuple[int, bytes]]] = {}
            for index in sorted(self._acked):
                partition, offset, value = self._acked[index]
                ordered.setdefault(partition, []).append((offset, value))
            return ordered


def produce_paced(
    producer: Any,
    topic: str,
    partitions: int,
    name: str,
    records_per_second: float,
    acks: Acknowledgements,
    stop: threading.Event,
) -> None:
    """Sends `<name>-<index>` values round-robin over the partitions at a steady rate until `stop`, tracking
    each future in `acks`; a `send` that itself fails (e.g. blocked past max_block_ms) lands in
    `acks.failures`, which the test checks."""
    index = 0
    started = time.monotonic()
    try:
        while not stop.is_set():
            value = f"{name}-{index:08d}".encode()
            acks.track(producer.send(topic, value, partition=index % partitions), value)
            index += 1
            ahead = index / records_per_second - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    except BaseException as exc:
        acks.failures.append(exc)


def check_log_holds(log: list[tuple[int, bytes | None]], acked: dict[int, bytes], log_start: int = 0) -> None:
    """The log's offsets run contiguously from `log_start`, no value appears twice, and every acknowledged
    offset holds its value."""
    offsets = [offset for offset, _ in log]
    assert offsets == list(range(log_start, log_start + len(log))), "log offsets are not contiguous"
    values = [value for _, value in log]
    duplicated = len(values) - len(set(values))
    assert duplicated == 0, f"{duplicated} values appear twice in the log"
    content = dict(log)
    missing = {offset: value for offset, value in acked.items() if content.get(offset) != value}
    if missing:
        first = min(missing)
        where = {value: offset for offset, value in log}
        raise AssertionError(
            f"{len(missing)} acknowledged records missing or moved (the log holds offsets {log_start}.."
            f"{log_start + len(log) - 1}): offset {first} was acknowledged for {missing[first]!r}, holds "
            f"{content.get(first)!r}; that value is at {where.get(missing[first])}; missing offsets "
            f"{sorted(missing)[:12]}"
        )


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """What /proc says about one process."""

    rss_bytes: int
    fds: int
    deleted_fds: int
    maps: int


def process_figures(pid: int) -> ProcessFigures:
    proc = Path(f"/proc/{pid}")
    rss = 0
    for line in (proc / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    fds = deleted = 0
    for entry in (proc / "fd").iterdir():
        try:
            target = os.readlink(entry)
        except OSError:
            continue  # closed between the listing and the readlink
        fds += 1
        deleted += target.endswith(" (deleted)")
    maps = len((proc / "maps").read_text().splitlines())
    return ProcessFigures(rss, fds, deleted, maps)


def seeded_random(name: str) -> tuple[random.Random, int]:
    """A random source whose seed (from `RAYBROKER_SEED`, else the clock) is printed with the test's figures."""
    seed = int(os.environ.get("RAYBROKER_SEED", time.time_ns() % 1_000_000))
    print(f"{name}: seed {seed} (RAYBROKER_SEED={seed} replays it)")
    return random.Random(seed), seed
