"""`PartitionLogActor` as a plain class (no Ray): appends, reads, offsets, crash recovery, bad client bytes,
retention, flushes and compaction, each checked against a list oracle and against kafka-python's reader."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest
import ray

from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.shares.acknowledgements import AcknowledgementBatch, AcknowledgeType
from actors.core.shares.group_share_config import EARLIEST, ResolvedShareConfig
from actors.metrics.names import (
    BYTES_IN,
    CLEANER_BYTES_READ,
    CLEANER_BYTES_WRITTEN,
    CLEANER_PASSES,
    LOG_END_OFFSET,
    LOG_SEGMENTS,
    LOG_SIZE,
    LOG_START_OFFSET,
    MESSAGES_IN,
    SHARE_BACKLOG,
    SHARE_IN_FLIGHT_BATCHES,
    SHARE_IN_FLIGHT_MESSAGES,
    SHARE_RECORD_ACKNOWLEDGEMENTS,
)
from actors.metrics.recorder import MetricsRecorder
from actors.server import partition_log
from actors.server.cleaner_actor import CleanerActor
from actors.server.partition_log import FetchResult, PartitionLogActor, PartitionState, ResumePoint
from storage import file_names
from storage.compaction.cleaner_manager import LogToClean
from storage.errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidRequestError,
    KafkaStorageError,
    LogDirLockedError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    StorageError,
)
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.files.log_dir_lock import LogDirLock
from storage.logdir.log_dirs import checkpointed_offsets
from storage.partition.log_read import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from storage.records.record_batch import (
    CRC_OFFSET,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
    ControlRecordType,
    build_control_batch,
)
from tests.actors.support import now_ms
from tests.storage.builders import Rec, as_recs, batch_bytes, crash, kafka_decode

SMALL_SEGMENTS = {"segment.bytes": "1024", "segment.index.bytes": "4096"}


def records(tag: str, count: int, *, keys: int | None = None) -> list[Rec]:
    """`count` records `<tag>-<i>`; with `keys`, only `keys` distinct keys (for compaction)."""
    stamp = now_ms()
    return [
        Rec(f"k{i % keys if keys else i}".encode(), f"{tag}-{i}".encode(), stamp + i, (("h", tag.encode()),))
        for i in range(count)
    ]


def open_actor(directory: Path, config: dict[str, str] | None = None, **kwargs: object) -> PartitionLogActor:
    return PartitionLogActor(str(directory), config or {}, **kwargs)  # type: ignore[arg-type]


def read_all(actor: PartitionLogActor, start: int = 0) -> list[Rec]:
    """Every record from `start`, fetched in small pieces as a consumer would."""
    out: list[Rec] = []
    offset = start
    while offset < actor.offsets()[1]:
        chunk = kafka_decode(actor.read(offset, 300))
        assert chunk, f"no progress at offset {offset}"
        out.extend(as_recs(r for r in chunk if r.offset >= offset))
        offset = chunk[-1].offset + 1
    return out


def log_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(file_names.LOG_SUFFIX))


def test_appends_get_contiguous_offsets_and_read_back_as_written(tmp_path: Path) -> None:
    actor = open_actor(tmp_path / "t-0", SMALL_SEGMENTS)
    assert actor.ready() == 0
    oracle: list[Rec] = []
    for index in range(12):
        batch = records(f"b{index}", 1 + index % 4)
        info = actor.append(batch_bytes(batch))
        assert (info.first_offset, info.last_offset) == (len(oracle), len(oracle) + len(batch) - 1)
        oracle.extend(batch)
    assert actor.offsets() == (0, len(oracle), len(oracle))
    assert read_all(actor) == oracle
    first_fetch = [r.offset for r in kafka_decode(actor.read(0, 10**6))]
    assert first_fetch == list(range(len(first_fetch)))  # one segment per fetch, as Kafka's
    state = actor.state()
    assert isinstance(state, PartitionState)
    assert state.segments > 1 and state.log_end_offset == len(oracle) and state.pid == os.getpid()
    on_disk = [r for path in log_files(tmp_path / "t-0") for r in kafka_decode(path.read_bytes())]
    assert as_recs(on_disk) == oracle


def test_fetch_reports_offsets_and_empty_at_the_end(tmp_path: Path) -> None:
    actor = open_actor(tmp_path / "t-0")
    actor.append(batch_bytes(records("a", 3)))
    result = actor.fetch(3)
    assert result == FetchResult(b"", 3, 0, 3, 3)
    assert as_recs(kafka_decode(actor.fetch(1).records))[-1].value == b"a-2"


@pytest.mark.parametrize("offset", [-1, 4, 10**12, "0", None])
def test_read_outside_the_log_raises_offset_out_of_range(tmp_path: Path, offset: object) -> None:
    actor = open_actor(tmp_path / "t-0")
    actor.append(batch_bytes(records("a", 3)))
    with pytest.raises(OffsetOutOfRangeError):
        actor.read(offset)  # type: ignore[arg-type]
    with pytest.raises(OffsetOutOfRangeError):
        actor.fetch(offset)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_bytes", [-1, "1024", None, 1.5, True])
def test_read_with_a_bad_size_raises_invalid_request(tmp_path: Path, max_bytes: object) -> None:
    actor = open_actor(tmp_path / "t-0")
    actor.append(batch_bytes(records("a", 3)))
    with pytest.raises(InvalidRequestError):
        actor.read(0, max_bytes)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError):
        actor.fetch(0, max_bytes)  # type: ignore[arg-type]


def test_list_offset_earliest_latest_and_by_time(tmp_path: Path) -> None:
    actor = open_actor(tmp_path / "t-0")
    batch = records("a", 5)
    actor.append(batch_bytes(batch))
    earliest = actor.list_offset(EARLIEST_TIMESTAMP)
    latest = actor.list_offset(LATEST_TIMESTAMP)
    assert earliest is not None and earliest.offset == 0
    assert latest is not None and latest.offset == 5
    by_time = actor.list_offset(batch[3].timestamp)
    assert by_time is not None and by_time.offset == 3
    assert actor.list_offset(batch[-1].timestamp + 1) is None


def test_close_and_reopen_keeps_every_record(tmp_path: Path) -> None:
    folder = tmp_path / "t-0"
    actor = open_actor(folder, SMALL_SEGMENTS)
    oracle = records("a", 40)
    for start in range(0, 40, 5):
        actor.append(batch_bytes(oracle[start : start + 5]))
    final = actor.close()
    assert final.log_end_offset == 40 and final.recovery_point == 40
    assert (folder / file_names.CLEAN_SHUTDOWN_FILE).exists()
    again = open_actor(folder, SMALL_SEGMENTS, recovery_point=final.recovery_point)
    assert read_all(again) == oracle
    assert again.append(batch_bytes(records("b", 1))).first_offset == 40


def test_close_after_the_log_dir_went_offline_writes_nothing_and_gives_the_offline_state(tmp_path: Path) -> None:
    """Kafka's handleLogDirFailure: the log is dropped without a flush or a clean-shutdown marker; `close` (the
    broker's shutdown) still answers, with where the log stood, and the next start recovers every record."""
    folder = tmp_path / "t-0"
    actor = open_actor(folder, SMALL_SEGMENTS)
    oracle = records("a", 12)
    for start in range(0, 12, 4):
        actor.append(batch_bytes(oracle[start : start + 4]))
    actor.go_offline("disk failed in a test")
    with pytest.raises(KafkaStorageError, match="offline"):
        actor.append(batch_bytes(records("b", 1)))
    for _ in range(2):
        final = actor.close()
        assert final.log_end_offset == 12 and final.log_start_offset == 0
    assert not (folder / file_names.CLEAN_SHUTDOWN_FILE).exists()
    with pytest.raises(KafkaStorageError, match="offline"):
        actor.offsets()
    assert read_all(open_actor(folder, SMALL_SEGMENTS)) == oracle


def test_crash_with_a_torn_tail_recovers_the_whole_batches_and_continues(tmp_path: Path) -> None:
    folder = tmp_path / "t-0"
    actor = open_actor(folder)
    oracle = records("a", 10)
    for start in range(0, 10, 2):
        actor.append(batch_bytes(oracle[start : start + 2]))
    crash(actor._log)
    active = log_files(folder)[-1]
    os.truncate(active, active.stat().st_size - 5)  # the last 2-record batch is torn
    recovered = open_actor(folder)
    assert recovered.offsets() == (0, 8, 8)
    assert read_all(recovered) == oracle[:8]
    assert recovered.append(batch_bytes(records("b", 2))).first_offset == 8
    assert [r.value for r in read_all(recovered)] == [r.value for r in oracle[:8]] + [b"b-0", b"b-1"]


def test_crash_keeps_an_idempotent_producers_state_so_a_retry_is_not_duplicated(tmp_path: Path) -> None:
    folder = tmp_path / "t-0"
    actor = open_actor(folder)
    first = batch_bytes(records("a", 3), producer_id=7, producer_epoch=0, base_sequence=0)
    actor.append(first)
    crash(actor._log)
    recovered = open_actor(folder)
    retry = recovered.append(first)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 2)
    assert recovered.offsets()[2] == 3


def test_appends_count_records_and_bytes_in_and_the_log_gauges_follow_the_files(tmp_path: Path) -> None:
    """Oracles: the records and batch bytes sent (a refused batch and an idempotent retry add nothing), the
    segment files' sizes on disk, the actor's own offsets."""
    metrics = MetricsRecorder()
    actor = open_actor(tmp_path / "orders-3", SMALL_SEGMENTS, metrics=metrics)
    sent_records = sent_bytes = 0
    for index in range(12):
        batch = batch_bytes(
            records(f"b{index}", index + 1), producer_id=5, producer_epoch=0, base_sequence=sent_records
        )
        actor.append(batch)
        sent_records += index + 1
        sent_bytes += len(batch)
        if index == 4:
            actor.append(batch)  # a producer's retry: a duplicate, not appended again
    with pytest.raises(CorruptRecordError):
        actor.append(_corrupt(batch_bytes(records("bad", 2)), CRC_OFFSET, b"\x00\x00\x00\x00"))
    assert metrics.value(MESSAGES_IN, "orders") == metrics.value(MESSAGES_IN, "") == sent_records
    assert metrics.value(BYTES_IN, "orders") == sent_bytes
    actor.delete_records(3)
    on_disk = sum(path.stat().st_size for path in (tmp_path / "orders-3").glob("*.log"))
    assert metrics.value(LOG_SIZE, "orders", "3") == on_disk == actor.state().size_bytes
    assert metrics.value(LOG_END_OFFSET, "orders", "3") == sent_records == actor.offsets()[2]
    assert metrics.value(LOG_START_OFFSET, "orders", "3") == 3
    assert metrics.value(LOG_SEGMENTS, "orders", "3") == len(list((tmp_path / "orders-3").glob("*.log"))) > 1
    actor.close()
    assert metrics.snapshot().gauges == {}


def _corrupt(data: bytes, position: int, value: bytes) -> bytes:
    return data[:position] + value + data[position + len(value) :]


BAD_BATCHES = {
    "base offset not 0": (lambda good: _corrupt(good, 0, struct.pack(">q", 5)), InvalidRecordError),
    "crc mismatch": (lambda good: _corrupt(good, CRC_OFFSET, b"\x00\x00\x00\x00"), CorruptRecordError),
    "magic 7": (lambda good: _corrupt(good, MAGIC_OFFSET, b"\x07"), CorruptRecordError),
    "magic 1": (lambda good: _corrupt(good, MAGIC_OFFSET, b"\x01"), StorageError),
    "count mismatch": (lambda good: _corrupt(good, RECORDS_COUNT_OFFSET, struct.pack(">i", 9)), StorageError),
    "truncated": (lambda good: good[:-3], CorruptRecordError),
    "control batch": (
        lambda good: build_control_batch(ControlRecordType.COMMIT, timestamp=now_ms(), producer_id=1, producer_epoch=0),
        InvalidRecordError,
    ),
    "empty": (lambda good: b"", InvalidRecordError),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_bad_client_batches_raise_typed_errors_and_write_nothing(tmp_path: Path, case: str) -> None:
    folder = tmp_path / "t-0"
    actor = open_actor(folder)
    good = batch_bytes(records("ok", 3))
    actor.append(good)
    before = {path.name: path.read_bytes() for path in log_files(folder)}
    make, error = BAD_BATCHES[case]
    with pytest.raises(error):
        actor.append(make(good))
    if make(good):
        with pytest.raises(error):
            actor.append(good + make(good))  # a bad batch rejects the whole call
    assert actor.offsets() == (0, 3, 3)
    assert {path.name: path.read_bytes() for path in log_files(folder)} == before


def test_bad_config_is_refused_before_a_folder_is_made(tmp_path: Path) -> None:
    for config in ({"no.such.key": "1"}, {"segment.bytes": "abc"}, {"retention.ms": "-5"}):
        with pytest.raises(InvalidConfigError):
            open_actor(tmp_path / "t-0", config).ready()
    assert not (tmp_path / "t-0").exists()
    actor = open_actor(tmp_path / "t-0")
    with pytest.raises(InvalidConfigError):
        actor.update_config({"segment.bytes": "-1"})


def test_delete_records_moves_the_log_start(tmp_path: Path) -> None:
    actor = open_actor(tmp_path / "t-0")
    oracle = records("a", 10)
    actor.append(batch_bytes(oracle))
    assert actor.delete_records(4) == 4
    assert actor.offsets() == (4, 10, 10)
    with pytest.raises(OffsetOutOfRangeError):
        actor.read(3)
    assert next(r.offset for r in kafka_decode(actor.read(4))) <= 4


def test_retention_by_size_deletes_old_segments_after_the_delay(tmp_path: Path) -> None:
    folder = tmp_path / "t-0"
    config = {**SMALL_SEGMENTS, "retention.bytes": "2048", "file.delete.delay.ms": "0"}
    actor = open_actor(folder, config)
    for index in range(60):
        actor.append(batch_bytes(records(f"b{index}", 2)))
    segments_before = actor.state().segments
    deleted = actor.delete_old_segments()
    assert deleted > 0
    state = actor.state()
    assert state.segments == segments_before - deleted
    assert state.log_start_offset == state.first_segment_base > 0
    assert actor.delete_due_files() == 0
    assert not any(p.name.endswith(file_names.DELETED_SUFFIX) for p in folder.iterdir())
    assert len(log_files(folder)) == state.segments
    assert read_all(actor, state.log_start_offset)[-1].value == b"b59-1"


def test_retention_by_time_after_update_config(tmp_path: Path) -> None:
    actor = open_actor(tmp_path / "t-0", SMALL_SEGMENTS)
    old = [Rec(b"k", b"old", now_ms() - 60_000 + i) for i in range(30)]
    for start in range(0, 30, 3):
        actor.append(batch_bytes(old[start : start + 3]))
    actor.append(batch_bytes(records("new", 3)))
    assert actor.delete_old_segments() == 0  # default retention is 7 days
    actor.update_config({**SMALL_SEGMENTS, "retention.ms": "1000"})
    assert actor.delete_old_segments() > 0
    assert [r.value for r in read_all(actor, actor.offsets()[0])][-3:] == [b"new-0", b"new-1", b"new-2"]


def test_flush_if_due_follows_flush_ms(tmp_path: Path) -> None:
    actor = open_actor(tmp_path / "t-0")
    actor.append(batch_bytes(records("a", 3)))
    assert not actor.flush_if_due()
    assert actor.state().recovery_point == 0
    actor.update_config({"flush.ms": "0"})
    assert actor.flush_if_due()
    assert actor.state().recovery_point == 3


def test_remove_expired_producers_uses_the_brokers_expiration(tmp_path: Path) -> None:
    actor = open_actor(tmp_path / "t-0", producer_id_expiration_ms=60_000)
    old = [Rec(b"k", b"v", now_ms() - 120_000)]
    actor.append(batch_bytes(old, producer_id=3, producer_epoch=0, base_sequence=0))
    actor.append(batch_bytes(records("a", 1), producer_id=4, producer_epoch=0, base_sequence=0))
    assert actor.remove_expired_producers() == 1, "producer 3's last batch is 2 minutes old, 4's is new"
    assert actor.remove_expired_producers() == 0


def test_cleanable_and_clean_keep_the_latest_value_per_key(tmp_path: Path) -> None:
    config = {**SMALL_SEGMENTS, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    actor = open_actor(tmp_path / "t-0", config)
    oracle = records("u", 120, keys=4)
    for start in range(0, 120, 4):
        actor.append(batch_bytes(oracle[start : start + 4]))
    found = actor.cleanable(None)
    assert isinstance(found, LogToClean) and found.first_dirty_offset == 0
    result = actor.clean(found.first_dirty_offset, found.first_uncleanable_offset)
    assert not result.aborted and result.messages_written < result.messages_read
    survivors = read_all(actor)
    latest = {r.key: r.value for r in oracle}
    assert {r.key: r.value for r in survivors} == latest
    assert len(survivors) < len(oracle)
    assert actor.offsets()[2] == 120


def test_a_pass_cleaned_by_a_cleaner_actor_is_swapped_in_while_appends_go_on(tmp_path: Path) -> None:
    config = {**SMALL_SEGMENTS, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    actor = open_actor(tmp_path / "t-0", config)
    oracle = records("u", 120, keys=4)
    for start in range(0, 120, 4):
        actor.append(batch_bytes(oracle[start : start + 4]))
    found = actor.cleanable(None)
    assert isinstance(found, LogToClean)
    snapshot = actor.snapshot_for_cleaning(found.first_dirty_offset, found.first_uncleanable_offset)
    metrics = MetricsRecorder()
    cleaned = CleanerActor({}, metrics).clean(snapshot)
    assert metrics.value(CLEANER_PASSES) == 1
    assert metrics.value(CLEANER_BYTES_READ) == cleaned.result.bytes_read > 0
    assert metrics.value(CLEANER_BYTES_WRITTEN) == cleaned.result.bytes_written < cleaned.result.bytes_read
    later = records("w", 8, keys=4)
    actor.append(batch_bytes(later))
    assert not actor.changed_since(snapshot)

    result = actor.swap_cleaned(cleaned)

    assert not result.aborted and result.segments_written > 0
    survivors = read_all(actor)
    assert {r.key: r.value for r in survivors} == {r.key: r.value for r in oracle + later}
    assert len(survivors) < len(oracle) + len(later)
    assert actor.offsets()[2] == 128
    with pytest.raises(InvalidRequestError):
        actor.swap_cleaned("not a pass")  # type: ignore[arg-type]


def test_cleanable_is_none_for_delete_topics(tmp_path: Path) -> None:
    actor = open_actor(tmp_path / "t-0", SMALL_SEGMENTS)
    for index in range(20):
        actor.append(batch_bytes(records(f"b{index}", 3)))
    assert actor.cleanable(None) is None


def test_a_log_that_cannot_open_leaves_a_failed_actor_raising_the_typed_error(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_bytes(b"")
    actor = open_actor(tmp_path / "not-a-dir" / "t-0")
    calls = ((actor.ready, ()), (actor.append, (batch_bytes(records("a", 1)),)), (actor.state, ()), (actor.close, ()))
    for method, args in calls:
        with pytest.raises(KafkaStorageError):
            method(*args)
    folder = tmp_path / "t-0"
    folder.mkdir()
    holder = LogDirLock(folder)
    try:
        with pytest.raises(LogDirLockedError):
            open_actor(folder).ready()
    finally:
        holder.release()
    assert open_actor(folder).ready() == 0


def test_resume_replaces_the_first_starts_config(tmp_path: Path) -> None:
    asked: list[bool] = []

    def resume() -> ResumePoint:
        asked.append(True)
        return ResumePoint(dict(SMALL_SEGMENTS), 0, 0)

    actor = open_actor(tmp_path / "t-0", {}, resume=resume)
    for index in range(20):
        actor.append(batch_bytes(records(f"b{index}", 3)))
    assert asked == [True] and actor.state().segments > 1
    first_start = open_actor(tmp_path / "t-1", SMALL_SEGMENTS, resume=lambda: None)
    for index in range(20):
        first_start.append(batch_bytes(records(f"b{index}", 3)))
    assert first_start.state().segments > 1


def test_resume_from_the_log_dirs_checkpoints_keeps_deleted_records_deleted(tmp_path: Path) -> None:
    folder = tmp_path / "t-0"
    actor = open_actor(folder)
    written = records("a", 15)
    actor.append(batch_bytes(written))
    assert actor.delete_records(10) == 10
    OffsetCheckpointFile(tmp_path / file_names.LOG_START_OFFSET_CHECKPOINT).write({("t", 0): 10})
    OffsetCheckpointFile(tmp_path / file_names.RECOVERY_POINT_CHECKPOINT).write({("t", 0): 0, ("t", 1): 7})
    OffsetCheckpointFile(tmp_path / file_names.REPLICATION_OFFSET_CHECKPOINT).write({("t", 0): 15})
    crash(actor._log)
    assert checkpointed_offsets(folder) == (0, 10, 15)
    resumed = open_actor(folder, resume=lambda: ResumePoint(None, *checkpointed_offsets(folder)))
    assert resumed.offsets() == (10, 15, 15)
    assert read_all(resumed, 10) == written[10:]
    crash(resumed._log)
    assert open_actor(folder).offsets() == (0, 15, 15)  # what Ray's restart with the first arguments did


def test_after_close_every_call_is_broker_not_available_and_close_repeats_its_answer(tmp_path: Path) -> None:
    actor = open_actor(tmp_path / "t-0")
    actor.append(batch_bytes(records("a", 3)))
    final = actor.close()
    assert final.log_end_offset == 3 and final.recovery_point == 3
    assert actor.close() == final
    calls = (
        (actor.append, (batch_bytes(records("b", 1)),)),
        (actor.read, (0,)),
        (actor.state, ()),
        (actor.delete_old_segments, ()),
        (actor.flush_if_due, ()),
        (actor.remove_expired_producers, ()),
        (actor.cleanable, (None,)),
    )
    for method, args in calls:
        with pytest.raises(BrokerNotAvailableError):
            method(*args)


def test_same_node_readers_learn_each_change_its_leader_epoch_and_the_close_without_a_call(tmp_path: Path) -> None:
    """The high-watermark file publishes the controller's leader epoch and whether the replica leads, and every
    change sends a notice to the partition's watchers, the close too (its file then says closed); a watcher's address
    must be a change watcher's abstract name."""
    import secrets
    import socket

    from actors.channels.change_notices import CHANGE_WATCHER_PREFIX
    from storage.partition.high_watermark_file import HighWatermarkReader

    actor = open_actor(tmp_path / "view-0")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = f"{CHANGE_WATCHER_PREFIX}test-{secrets.token_hex(4)}"
    receiver.bind(address)
    receiver.settimeout(5.0)
    with pytest.raises(InvalidRequestError):
        actor.watch_changes("\0another-socket")
    actor.watch_changes(address)
    actor.append(batch_bytes(records("a", 3)))
    assert receiver.recv(512) == b"view-0"
    reader = HighWatermarkReader.open(actor.locate(0).high_watermark_file)
    assert reader is not None
    published = reader.read()
    assert published is not None and (published.high_watermark, published.leader_epoch) == (3, 0)
    # The actor's node: "" outside Ray, Ray's node id when an earlier test of the session started Ray.
    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    actor.update_replication(LeaderAndIsr("view", 0, node, 4, (node,), (node,)))
    assert receiver.recv(512) == b"view-0"
    published = reader.read()
    assert published is not None and published.leader_epoch == 4
    actor.close()
    assert receiver.recv(512) == b"view-0"
    assert reader.read() is None
    reader.close()
    receiver.close()


@pytest.mark.parametrize("call", ["fetch", "locate"])
@pytest.mark.parametrize(
    ("client_epoch", "new_leader", "error"),
    [(-1, "other", NotLeaderOrFollowerError), (3, "other", FencedLeaderEpochError), (3, "", FencedLeaderEpochError)],
    ids=["unfenced-leadership-moved", "fenced-leadership-moved", "fenced-epoch-bumped"],
)
def test_a_long_poll_at_the_log_end_ends_at_once_when_the_controller_changes_the_leader_epoch(
    tmp_path: Path, call: str, client_epoch: int, new_leader: str, error: type[Exception]
) -> None:
    """A client's long poll waiting at the log end is answered with the error the controller's new state gives as
    soon as that state arrives (as Kafka completes its delayed fetches on a leader change), not when `max_wait_ms`
    runs out. The client's leader epoch is checked first, as Kafka's `localLogWithEpochOrThrow` does:
    FENCED_LEADER_EPOCH for a client in an older epoch, whoever leads now; NOT_LEADER_OR_FOLLOWER for a client
    that sent no epoch, once another replica leads."""
    actor = open_actor(tmp_path / "poll-0")
    actor.append(batch_bytes(records("a", 2)))
    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    replicas = (node, "other")
    actor.update_replication(LeaderAndIsr("poll", 0, node, 3, replicas, replicas))
    outcome: list[Exception | None] = []

    def poll() -> None:
        try:
            getattr(actor, call)(2, max_wait_ms=60_000, current_leader_epoch=client_epoch)
        except Exception as exc:  # handed to the test's thread to assert on
            outcome.append(exc)
        else:
            outcome.append(None)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    poller.join(0.3)
    assert poller.is_alive(), f"the poll did not wait at the log end: {outcome}"
    changed = time.monotonic()
    actor.update_replication(LeaderAndIsr("poll", 0, new_leader or node, 4, replicas, replicas))
    poller.join(10)
    assert not poller.is_alive() and time.monotonic() - changed < 10
    assert len(outcome) == 1 and isinstance(outcome[0], error), outcome
    actor.close()


def test_a_leaders_share_partitions_are_counted_and_show_their_backlog_in_its_gauges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Oracles: the five records acquired and the acknowledgements sent (two accepted, one rejected). The actor runs
    as outside Ray even when this test process is connected to it (an earlier test's session): on a Ray node its
    share-partition states would be the group coordinator actor's, for a topic that cluster does not have."""
    monkeypatch.setattr(partition_log, "_node_id", lambda: "")
    metrics = MetricsRecorder()
    actor = open_actor(tmp_path / "orders-3", metrics=metrics)
    actor.append(batch_bytes(records("s", 5)))
    config = ResolvedShareConfig(auto_offset_reset=EARLIEST)
    fetched = actor.share_fetch("g", "m1", config, 1 << 20, 500)
    assert [(r.first_offset, r.last_offset) for r in fetched.acquired] == [(0, 4)]
    labels = ("g", "orders", "3")
    assert metrics.value(SHARE_IN_FLIGHT_MESSAGES, *labels) == metrics.value(SHARE_BACKLOG, *labels) == 5
    assert metrics.value(SHARE_IN_FLIGHT_BATCHES, *labels) == 1
    accept, reject = int(AcknowledgeType.ACCEPT), int(AcknowledgeType.REJECT)
    actor.share_acknowledge(
        "g", "m1", config, [AcknowledgementBatch(0, 1, (accept,)), AcknowledgementBatch(2, 2, (reject,))]
    )
    assert metrics.value(SHARE_RECORD_ACKNOWLEDGEMENTS, "Accept") == 2
    assert metrics.value(SHARE_RECORD_ACKNOWLEDGEMENTS, "Reject") == 1
    # Offsets 3 and 4 still acquired: two records in flight, and the backlog.
    assert metrics.value(SHARE_IN_FLIGHT_MESSAGES, *labels) == metrics.value(SHARE_BACKLOG, *labels) == 2
    actor.close()
    assert metrics.snapshot().gauges == {}
