"""Kill -9 harness for the storage layer: a writer process is SIGKILLed again and again, at random moments and
at chosen points (a torn append, mid-roll, during retention, between the renames of a compaction swap, during a
checkpoint write), and after every kill the log dir is reopened and checked against the acknowledged writes.

The writer is `storage_writer.py` (its docstring defines "acknowledged" and the ack file). After each kill:

- every acknowledged record of the `plain` log at or above the log start offset is there exactly once, with its
  offset, key and value; offsets run without a gap from the log start to the log end; the log start is not above
  the highest bound a retention pass could have reached; at most the one unacknowledged in-flight append adds
  records after the last acknowledged offset (they are then adopted: they must survive the next kills too);
- in the `compacted` log offsets strictly increase; an acknowledged record is present with its value unless a
  later record of its key exists or it is a tombstone; the newest record of every key is not older than its
  newest acknowledged record (no lost update, no resurrection);
- both indexes of every segment agree with its `.log` (`storage_checks`); the four offset checkpoints parse and
  do not point past the log end; both logs accept a new append (acknowledged like the writer's).

Half of the reopens end with a clean shutdown whose marker is then removed, so the next writer also recovers.
Runs are done in /dev/shm when it exists (`shm_path`): the crash model is a process kill, so fsync adds nothing to
the check, and tmpfs keeps the many fsyncs of rolls and checkpoints from dominating a cycle.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from storage import file_names
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.logdir.log_manager import LogManager
from storage.partition.log import Log
from storage.records.record_batch import RecordBatchBuilder
from tests.reliability import storage_writer
from tests.reliability.modes import scaled
from tests.reliability.storage_checks import check_log_indexes, shm_path_fixture  # noqa: F401 - the `shm_path` fixture

pytestmark = pytest.mark.reliability

WRITER = Path(storage_writer.__file__)
KILLS = scaled(50, 400)
# How long a writer may take to load and report `ready`, and the longest it runs before the harness kills it
# anyway (a crash point that the run never reached).
READY_TIMEOUT_S = 20.0
MAX_RUN_S = 0.8
KILL_PHASES = ("append", "roll", "retention", "clean", "swap", "checkpoint", "flush", "delete")

Record = tuple[bytes | None, bytes | None]


class WriterServer:
    """The writer fork server (`storage_writer.serve`) and a line reader over its stdout."""

    def __init__(self, stderr_path: Path) -> None:
        self._stderr = open(stderr_path, "w+b")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [sys.executable, str(WRITER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=WRITER.parents[2],
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin = self.process.stdin
        self._fd = self.process.stdout.fileno()
        self._pending = b""
        self._early: list[str] = []

    def start(self, log_dir: Path, ack_path: Path, seed: int, preallocate: bool, point: str, hit: int) -> int:
        self._stdin.write(f"{log_dir} {ack_path} {seed} {int(preallocate)} {point} {hit}\n".encode())
        self._stdin.flush()
        # The forked writer may print before the server prints its pid: its lines are kept for later reads.
        early = []
        while (line := self.read_line(READY_TIMEOUT_S)) is not None and not line.startswith("pid "):
            early.append(line)
        assert line is not None, f"writer server did not answer: {self.stderr()}"
        self._early = early + self._early
        return int(line.split()[1])

    def read_line(self, timeout_s: float) -> str | None:
        """The next stdout line, or None after `timeout_s`."""
        if self._early:
            return self._early.pop(0)
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._fd], [], [], remaining)[0]:
                return None
            chunk = os.read(self._fd, 65536)
            assert chunk, f"writer server exited: {self.stderr()}"
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def lines_until(self, timeout_s: float) -> Iterator[str]:
        deadline = time.monotonic() + timeout_s
        while (line := self.read_line(max(0.0, deadline - time.monotonic()))) is not None:
            yield line

    def stderr(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-4000:]

    def close(self) -> None:
        self._stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._stderr.close()


@dataclass
class Oracle:
    """What the ack file says must be in each log."""

    records: dict[str, dict[int, Record]] = field(default_factory=lambda: {"plain": {}, "compacted": {}})
    retention_bound: int = 0
    pending: dict[str, int] = field(default_factory=lambda: {"plain": 0, "compacted": 0})

    @classmethod
    def read(cls, ack_path: Path) -> Oracle:
        oracle = cls()
        if not ack_path.exists():
            return oracle
        text = ack_path.read_text(encoding="utf-8")
        # A kill during the ack write can leave a partial last line: that append was not acknowledged.
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            entry = json.loads(line)
            if "intent" in entry:
                oracle.pending[entry["intent"]] = entry["n"]
            elif "retention" in entry:
                oracle.retention_bound = max(oracle.retention_bound, entry["bound"])
            else:
                topic = entry["topic"]
                oracle.pending[topic] = 0
                for n, (key, value) in enumerate(entry["records"]):
                    offset = entry["first"] + n
                    record = (_unhex(key), _unhex(value))
                    known = oracle.records[topic].setdefault(offset, record)
                    assert known == record, f"{topic} offset {offset} acknowledged twice: an acked record was lost"
        return oracle


def _unhex(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def check_plain(log: Log, oracle: Oracle) -> list[tuple[int, Record]]:
    """Checks the delete-policy log; returns its records past the last acknowledged offset (to adopt)."""
    acked = oracle.records["plain"]
    start = log.log_start_offset
    assert start <= oracle.retention_bound or start == 0, (
        f"log start {start} > retention bound {oracle.retention_bound}"
    )
    found = [(record.offset, (record.key, record.value)) for record in log.records()]
    offsets = [offset for offset, _ in found]
    assert offsets == list(range(start, log.log_end_offset)), f"plain offsets not contiguous from {start}: {offsets}"
    present = dict(found)
    for offset, record in acked.items():
        if offset >= start:
            assert present.get(offset) == record, f"plain: acknowledged offset {offset} lost or changed"
    last_acked = max(acked, default=-1)
    extras = [(offset, record) for offset, record in found if offset > last_acked]
    assert len(extras) <= oracle.pending["plain"], f"plain: {len(extras)} unacknowledged records appeared"
    return extras


def check_compacted(log: Log, oracle: Oracle) -> list[tuple[int, Record]]:
    """Checks the compacted log; returns its records past the last acknowledged offset (to adopt)."""
    acked = oracle.records["compacted"]
    found = [(record.offset, (record.key, record.value)) for record in log.records()]
    offsets = [offset for offset, _ in found]
    assert offsets == sorted(set(offsets)), "compacted: duplicate or unordered offsets"
    present = dict(found)
    newest_in_log: dict[bytes | None, int] = {}
    for offset, (key, _) in found:
        newest_in_log[key] = offset
    newest_acked: dict[bytes | None, int] = {}
    for offset in sorted(acked):
        newest_acked[acked[offset][0]] = offset
    for offset, (key, value) in acked.items():
        if offset in present:
            assert present[offset] == (key, value), f"compacted: offset {offset} changed"
        else:
            superseded = newest_in_log.get(key, -1) > offset or newest_acked[key] > offset
            assert superseded or value is None, f"compacted: acknowledged offset {offset} of key {key!r} lost"
    for key, offset in newest_acked.items():
        assert newest_in_log.get(key, offset) >= offset, f"compacted: key {key!r} went back to an older value"
    last_acked = max(acked, default=-1)
    assert log.log_end_offset > last_acked
    extras = [(offset, record) for offset, record in found if offset > last_acked]
    assert len(extras) <= oracle.pending["compacted"], f"compacted: {len(extras)} unacknowledged records appeared"
    return extras


def append_line(ack_path: Path, entry: dict[str, object]) -> None:
    with open(ack_path, "a", encoding="utf-8") as acks:
        acks.write(json.dumps(entry) + "\n")


def verify(log_dir: Path, ack_path: Path, rng: random.Random) -> int:
    """Reopens the dir, checks it (see the module docstring), appends, shuts down; returns bytes dropped."""
    oracle = Oracle.read(ack_path)
    manager = LogManager([log_dir], topic_configs=storage_writer.topic_configs(False), file_delete_delay_ms=0)
    manager.startup()
    try:
        logs = {topic: manager.get_or_create_log(topic, 0) for topic in ("plain", "compacted")}
        dropped = sum(drop.size for log in logs.values() for drop in log.dropped_on_open)
        _adopt(ack_path, "plain", check_plain(logs["plain"], oracle))
        _adopt(ack_path, "compacted", check_compacted(logs["compacted"], oracle))
        for log in logs.values():
            check_log_indexes(log)
        for name in (
            file_names.RECOVERY_POINT_CHECKPOINT,
            file_names.LOG_START_OFFSET_CHECKPOINT,
            file_names.REPLICATION_OFFSET_CHECKPOINT,
            file_names.CLEANER_OFFSET_CHECKPOINT,
        ):
            for (topic, _), offset in OffsetCheckpointFile(log_dir / name, read_only=True).read().items():
                assert offset <= logs[topic].log_end_offset, f"{name}: {topic} at {offset} past the log end"
        for topic, log in logs.items():
            builder = RecordBatchBuilder()
            key, value = b"key-0", f"verify-{rng.getrandbits(32)}".encode()
            builder.append(key, value, timestamp=int(time.time() * 1000))
            info = log.append(builder.build())
            append_line(ack_path, {"topic": topic, "first": info.first_offset, "records": [[_hex(key), _hex(value)]]})
    finally:
        manager.shutdown()
    if rng.random() < 0.5:
        (log_dir / file_names.CLEAN_SHUTDOWN_FILE).unlink()
    return dropped


def _adopt(ack_path: Path, topic: str, extras: list[tuple[int, Record]]) -> None:
    """Records that survived an unacknowledged append are part of the log now: later kills must keep them."""
    for offset, (key, value) in extras:
        append_line(ack_path, {"topic": topic, "first": offset, "records": [[_hex(key), _hex(value)]]})


@pytest.mark.slow
@pytest.mark.timeout(scaled(240, 3600))
def test_writer_killed_at_random_moments_and_points_loses_no_acknowledged_record(shm_path: Path) -> None:
    run_dir = shm_path
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    log_dir, ack_path = run_dir / "logs", run_dir / "acks.jsonl"
    server = WriterServer(run_dir / "writer.stderr")
    modes: Counter[str] = Counter()
    phases_hit: Counter[str] = Counter()
    dropped_bytes = 0
    try:
        for cycle in range(KILLS):
            mode = rng.choice(("delay", "phase", "point", "point"))
            point = rng.choice(storage_writer.CRASH_POINTS) if mode == "point" else "none"
            hit = rng.randint(1, 4) if mode == "point" else 0
            target = rng.choice(KILL_PHASES)
            delay_s = rng.uniform(0.0, 0.3)
            pid = server.start(log_dir, ack_path, rng.randrange(2**32), rng.random() < 0.3, point, hit)
            outcome = "timeout"
            for line in server.lines_until(READY_TIMEOUT_S):
                if line == "phase ready":
                    break
                if line.startswith("crash "):
                    # A crash point reached while loading: a crash during recovery, which must be safe too.
                    outcome = f"{line} (loading)"
                    break
                assert not line.startswith("exit"), f"writer died while loading: {server.stderr()}"
            run_for_s = delay_s if mode == "delay" else MAX_RUN_S
            for line in server.lines_until(run_for_s) if outcome == "timeout" else ():
                if mode == "phase" and line == f"phase {target}":
                    os.kill(pid, signal.SIGKILL)
                    outcome = f"phase {target}"
                    break
                if line.startswith("crash "):
                    outcome = line
                    break
                assert not line.startswith("exit"), f"writer failed (seed {seed}, cycle {cycle}): {server.stderr()}"
            if outcome == "timeout":
                os.kill(pid, signal.SIGKILL)
                outcome = "delay" if mode == "delay" else "timeout"
            for line in server.lines_until(READY_TIMEOUT_S):
                if line.startswith("exit "):
                    status = int(line.split()[1])
                    break
            else:
                raise AssertionError("writer server did not report the writer's end")
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
                f"writer ended with status {status} (seed {seed}, cycle {cycle}): {server.stderr()}"
            )
            modes[outcome.split()[0]] += 1
            phases_hit[outcome] += 1
            try:
                dropped_bytes += verify(log_dir, ack_path, rng)
            except AssertionError as exc:
                raise AssertionError(f"after kill {cycle + 1} ({outcome}, seed {seed}): {exc}") from exc
    finally:
        server.close()
    oracle = Oracle.read(ack_path)
    print(
        f"\n{KILLS} kills (seed {seed}): {dict(modes)}; at {dict(sorted(phases_hit.items()))}; "
        f"{len(oracle.records['plain'])} + {len(oracle.records['compacted'])} records acknowledged; "
        f"{dropped_bytes} torn bytes dropped by recovery; 0 acknowledged records lost or duplicated"
    )
    assert sum(modes.values()) == KILLS
    assert modes["crash"] > 0 and modes["phase"] + modes["delay"] > 0
