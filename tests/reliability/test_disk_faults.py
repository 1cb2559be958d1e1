"""Disk faults: a log dir that fills up or turns read-only while the broker runs.

Tests run as root here, so `chmod` would not stop a single write; faults are injected at the OS-call layer
instead (`DiskFaults`): every write-side call (`open` for writing, `pwrite(v)`, `write`, `fsync`, `ftruncate`,
`rename`/`replace`, `mkdir`, `unlink`) whose path lies inside a broken dir raises `OSError(ENOSPC/EROFS/EIO)`,
optionally after writing half of its bytes (a torn write, what a full disk gives). Reads keep working, as on
a real read-only or full disk. The oracle is the list of acknowledged records per partition: after the fault,
the broken dir must be offline with `KafkaStorageError`, the other dir must keep serving, and after a reopen
every acknowledged record is there exactly once, in order, and nothing else.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.errors import KafkaStorageError
from storage.logdir.log_manager import LogManager
from storage.partition.log import Log
from storage.records.record_batch import RecordBatchBuilder
from tests.conftest import ONE_ACTOR_PER_PARTITION
from tests.reliability.modes import scaled

pytestmark = pytest.mark.reliability

TopicPartition = tuple[str, int]
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class DiskFaults:
    """Makes the write-side OS calls on paths inside `broken` dirs fail, from the `fail_from`-th such call on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.broken: list[Path] = []
        self.error = errno.ENOSPC
        self.torn = False
        self.fail_from = 1
        self.calls = 0
        self.failures = 0
        self._real: dict[str, Callable[..., Any]] = {}
        for name in ("pwrite", "pwritev", "write", "fsync", "ftruncate", "replace", "rename", "mkdir", "unlink"):
            self._real[name] = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(name))
        self._real["os.open"] = os.open
        monkeypatch.setattr(os, "open", self._os_open)
        self._real["open"] = builtins.open
        monkeypatch.setattr(builtins, "open", self._open)
        monkeypatch.setattr(io, "open", self._open)

    def break_dir(self, directory: Path, error: int = errno.ENOSPC, *, torn: bool = False, fail_from: int = 1) -> None:
        self.broken.append(directory.resolve())
        self.error, self.torn, self.fail_from, self.calls = error, torn, fail_from, 0

    def repair(self) -> None:
        self.broken.clear()

    def _hits(self, target: object) -> bool:
        if not self.broken:
            return False
        if isinstance(target, int):
            try:
                target = os.readlink(f"/proc/self/fd/{target}")
            except OSError:
                return False
        if not isinstance(target, str | os.PathLike):
            return False
        path = Path(os.fsdecode(target)).absolute()
        if not any(path == d or d in path.parents for d in self.broken):
            return False
        self.calls += 1
        if self.calls < self.fail_from:
            return False
        self.failures += 1
        return True

    def _fail(self, target: object) -> OSError:
        return OSError(self.error, os.strerror(self.error), str(target))

    def _wrap(self, name: str) -> Callable[..., Any]:
        real = self._real[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            targets = args[:2] if name in ("replace", "rename") else args[:1]
            if any(self._hits(target) for target in targets):
                if self.torn and name in ("pwrite", "write"):
                    data = memoryview(args[1])
                    real(args[0], data[: len(data) // 2], *args[2:])
                elif self.torn and name == "pwritev":
                    first = memoryview(args[1][0])
                    real(args[0], [first[: len(first) // 2]], *args[2:])
                raise self._fail(args[0])
            return real(*args, **kwargs)

        return call

    def _os_open(self, path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & WRITE_FLAGS and self._hits(path):
            raise self._fail(path)
        return self._real["os.open"](path, flags, *args, **kwargs)

    def _open(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(flag in mode for flag in "wax+") and self._hits(file):
            raise self._fail(file)
        return self._real["open"](file, mode, *args, **kwargs)


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[DiskFaults]:
    injector = DiskFaults(monkeypatch)
    yield injector
    injector.repair()


def batch(values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(None, value, timestamp=time.time_ns() // 1_000_000)
    return builder.build()


class Oracle:
    """What was acknowledged, per partition, in order."""

    def __init__(self) -> None:
        self.acked: dict[TopicPartition, list[bytes]] = {}
        self.next_value = 0

    def append(self, log: Log, tp: TopicPartition, count: int = 3) -> None:
        values = [f"{tp[0]}-{tp[1]}-{self.next_value + i}".encode() for i in range(count)]
        self.next_value += count
        log.append(batch(values))
        self.acked.setdefault(tp, []).extend(values)

    def check(self, manager: LogManager) -> None:
        for tp, values in self.acked.items():
            log = manager.get_log(*tp)
            assert log is not None, tp
            records = list(log.records())
            assert [r.value for r in records] == values, tp
            assert [r.offset for r in records] == list(range(len(values))), tp


def started(dirs: list[Path], **config: Any) -> LogManager:
    manager = LogManager(dirs, **config)
    manager.startup()
    return manager


def split_by_dir(manager: LogManager, tps: list[TopicPartition]) -> dict[Path, list[TopicPartition]]:
    found: dict[Path, list[TopicPartition]] = {}
    for tp in tps:
        directory = manager.log_dir_of(*tp)
        assert directory is not None
        found.setdefault(directory, []).append(tp)
    return found


# --- storage level: LogManager over two dirs, no Ray ------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "torn", "segment_bytes"),
    [
        (errno.ENOSPC, True, 1024 * 1024),
        (errno.EROFS, False, 1024 * 1024),
        (errno.EIO, False, 1024 * 1024),
        (errno.ENOSPC, False, 300),
    ],
    ids=["full-torn-write", "read-only", "eio", "full-at-roll"],
)
def test_a_failing_log_dir_goes_offline_while_the_other_serves_and_nothing_acked_is_lost(
    tmp_path: Path, faults: DiskFaults, error: int, torn: bool, segment_bytes: int
) -> None:
    from storage.config.log_config import LogConfig

    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = started(dirs, default_config=LogConfig(segment_bytes=segment_bytes))
    oracle = Oracle()
    tps = [("t", p) for p in range(4)]
    for tp in tps:
        for _ in range(3):
            oracle.append(manager.get_or_create_log(*tp), tp)
    by_dir = split_by_dir(manager, tps)
    bad, good = dirs[0].resolve(), dirs[1].resolve()
    assert set(by_dir) == {bad, good}

    faults.break_dir(bad, error, torn=torn)
    for tp in by_dir[bad]:
        log = manager.get_log(*tp)
        assert log is not None
        end = log.log_end_offset
        with pytest.raises(KafkaStorageError):
            log.append(batch([b"never acknowledged"] * 3))
        assert log.log_end_offset == end
    manager.checkpoint_recovery_points()
    assert set(manager.offline_dirs) == {bad}
    assert os.strerror(error) in manager.offline_dirs[bad]
    for tp in by_dir[bad]:
        with pytest.raises(KafkaStorageError, match="offline"):
            manager.get_log(*tp)
        with pytest.raises(KafkaStorageError, match="offline"):
            manager.get_or_create_log(*tp)

    for tp in by_dir[good]:
        oracle.append(manager.get_or_create_log(*tp), tp)
    new_tp = ("t", 4)
    oracle.append(manager.get_or_create_log(*new_tp), new_tp)
    assert manager.log_dir_of(*new_tp) == good
    manager.checkpoint_recovery_points()
    manager.run_retention()
    assert set(manager.offline_dirs) == {bad}
    assert [info.online for info in manager.describe_dirs()] == [False, True]
    manager.shutdown()

    faults.repair()
    reopened = started(dirs)
    try:
        assert reopened.offline_dirs == {}
        oracle.check(reopened)
        assert set(reopened.all_logs()) == set(oracle.acked)
    finally:
        reopened.shutdown()


def test_every_log_dir_failing_is_a_clear_error_not_a_crash(tmp_path: Path, faults: DiskFaults) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = started(dirs)
    oracle = Oracle()
    for p in range(2):
        oracle.append(manager.get_or_create_log("t", p), ("t", p))
    for directory in dirs:
        faults.break_dir(directory, errno.EROFS)
    manager.checkpoint_recovery_points()
    assert set(manager.offline_dirs) == {d.resolve() for d in dirs}
    with pytest.raises(KafkaStorageError):
        manager.get_or_create_log("t", 9)
    manager.shutdown()
    with pytest.raises(KafkaStorageError, match="every log dir is offline"):
        LogManager(dirs).startup()
    faults.repair()
    reopened = started(dirs)
    try:
        oracle.check(reopened)
    finally:
        reopened.shutdown()


def test_a_dir_that_cannot_be_written_at_startup_goes_offline_and_the_other_starts(
    tmp_path: Path, faults: DiskFaults
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    first = started(dirs)
    oracle = Oracle()
    for p in range(2):
        oracle.append(first.get_or_create_log("t", p), ("t", p))
    first.shutdown()
    faults.break_dir(dirs[0], errno.EROFS)
    manager = started(dirs)
    try:
        assert set(manager.offline_dirs) == {dirs[0].resolve()}
        served = [tp for tp in oracle.acked if manager.log_dir_of(*tp) == dirs[1].resolve()]
        assert served
        for tp in served:
            log = manager.get_log(*tp)
            assert log is not None and [r.value for r in log.records()] == oracle.acked[tp]
    finally:
        manager.shutdown()


@pytest.mark.parametrize("fail_from", range(1, scaled(12, 80), scaled(3, 1)))
def test_a_fault_at_any_write_of_a_busy_dir_loses_no_acknowledged_record(
    tmp_path: Path, faults: DiskFaults, fail_from: int
) -> None:
    """The fault hits the `fail_from`-th write-side call into the dir: mid-append, mid-roll, mid-checkpoint."""
    from storage.config.log_config import LogConfig

    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = started(dirs, default_config=LogConfig(segment_bytes=400, index_interval_bytes=64))
    oracle = Oracle()
    tps = [("t", p) for p in range(2)]
    for tp in tps:
        oracle.append(manager.get_or_create_log(*tp), tp)
    faults.break_dir(dirs[0], errno.ENOSPC, torn=True, fail_from=fail_from)
    for round_index in range(scaled(12, 40)):
        for tp in tps:
            try:
                log = manager.get_or_create_log(*tp)
                oracle.append(log, tp, count=2)
            except KafkaStorageError:
                pass
        if round_index % 3 == 2:
            manager.checkpoint_recovery_points()
    manager.shutdown()
    faults.repair()
    reopened = started(dirs)
    try:
        oracle.check(reopened)
    finally:
        reopened.shutdown()


# --- broker level: Ray, two log dirs ------------------------------------------------------------------------


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def consume_all(topic: str, partitions: list[int], timeout_s: float = 60.0) -> dict[int, list[bytes]]:
    """Every record of the partitions, read until the consumer's position reaches each one's high watermark."""
    from actors import Consumer
    from actors.calls import call
    from actors.server.partition_lookup import partition_actor

    ends = {p: call(partition_actor(topic, p).offsets.remote())[1] for p in partitions}
    consumer = Consumer(auto_offset_reset="earliest", value_deserializer=bytes)
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([(topic, p) for p in partitions])
        found: dict[int, list[bytes]] = {p: [] for p in partitions}
        while any(consumer.position((topic, p)) < ends[p] for p in partitions):
            assert time.monotonic() < deadline, f"not every record read within {timeout_s} s"
            for record in consumer.poll(timeout_ms=500):
                found[record.partition].append(record.value)
        return found
    finally:
        consumer.close()


@pytest.mark.ray
def test_a_broker_log_dir_that_fills_up_goes_offline_while_the_other_serves_and_nothing_acked_is_lost(
    start_test_broker: Callable[..., tuple[Any, list[Path]]],
) -> None:
    """Root ignores file modes, so the partitions of one dir get a file-size limit (RLIMIT_FSIZE at their
    current size, on their own processes): their next append fails with EFBIG, as on a full disk. Slow: two brokers
    start (the second over the same dirs, to show the dir comes back), each ~5 s of partition actors."""
    import resource

    from actors import Admin, Producer
    from actors.calls import call, get_actor
    from actors.options import log_manager_name
    from actors.server.partition_lookup import partition_actor

    broker, dirs = start_test_broker(log_dirs_count=2, **ONE_ACTOR_PER_PARTITION)
    admin = Admin(broker)
    admin.create_topic("disk", 4)
    acked: dict[int, list[bytes]] = {p: [] for p in range(4)}
    with Producer(linger_ms=0) as producer:
        for index in range(scaled(20, 400)):
            value = f"before-{index}".encode()
            producer.send("disk", value, partition=index % 4).result(timeout=60)
            acked[index % 4].append(value)
    bad_dir = dirs[0].resolve()
    placement = {p.partition: Path(p.log_dir) for p in admin.describe_topic("disk").partitions}
    bad = [p for p, d in placement.items() if d == bad_dir]
    good = [p for p, d in placement.items() if d != bad_dir]
    assert bad and good
    for partition in bad:
        state = call(partition_actor("disk", partition).state.remote())
        resource.prlimit(state.pid, resource.RLIMIT_FSIZE, (state.size_bytes, state.size_bytes))

    with pytest.raises(KafkaStorageError):
        call(partition_actor("disk", bad[0]).append.remote(batch([b"never acknowledged"])))
    manager = get_actor(log_manager_name(broker.node_of("disk", bad[0])))
    wait_until(lambda: call(manager.dirs.remote())[str(bad_dir)] is not None)
    assert "File too large" in call(manager.dirs.remote())[str(bad_dir)]
    for partition in bad:
        for method, args in (("fetch", (0,)), ("append", (batch([b"x"]),)), ("offsets", ())):
            with pytest.raises(KafkaStorageError, match="offline"):
                call(getattr(partition_actor("disk", partition), method).remote(*args))

    with Producer(linger_ms=0) as producer:
        for index in range(scaled(8, 100)):
            partition = good[index % len(good)]
            value = f"after-{index}".encode()
            producer.send("disk", value, partition=partition).result(timeout=60)
            acked[partition].append(value)
    assert consume_all("disk", good) == {p: acked[p] for p in good}

    restarted, _ = start_test_broker(log_dirs=dirs, **ONE_ACTOR_PER_PARTITION)
    dirs_now = call(get_actor(log_manager_name(restarted.node_of("disk", 0))).dirs.remote())
    assert all(reason is None for reason in dirs_now.values())
    assert consume_all("disk", list(range(4))) == acked
