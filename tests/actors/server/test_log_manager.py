"""The log-manager actor on a real local Ray: placement over its log dirs, the scheduler's work (checkpoints,
flushes, retention, compaction, delayed deletes) on short intervals, and restarts of the log manager and of
its partition actors (they come back with the topic's current config and are never duplicated)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray

from actors.calls import call
from actors.clients.broker import Broker
from storage import file_names
from storage.errors import BrokerNotAvailableError, LogDirLockedError, OffsetOutOfRangeError, RequestTimedOutError
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.files.log_dir_lock import LogDirLock
from tests.actors.support import manager, now_ms, wait_for
from tests.conftest import ONE_ACTOR_PER_PARTITION
from tests.storage.builders import Rec, as_recs, batch_bytes, kafka_decode

pytestmark = pytest.mark.ray

StartBroker = Callable[..., tuple[Broker, list[Path]]]


def fill(handle: Any, tag: str, batches: int, per_batch: int = 3, keys: int | None = None) -> list[Rec]:
    written: list[Rec] = []
    for index in range(batches):
        stamp = now_ms()
        batch = [
            Rec(f"k{(index * per_batch + i) % keys if keys else i}".encode(), f"{tag}-{index}-{i}".encode(), stamp)
            for i in range(per_batch)
        ]
        call(handle.append.remote(batch_bytes(batch)), timeout_s=60)
        written.extend(batch)
    return written


def read_all(handle: Any) -> list[Rec]:
    start, high_watermark, _ = call(handle.offsets.remote())
    out: list[Rec] = []
    offset = start
    while offset < high_watermark:
        chunk = [r for r in kafka_decode(call(handle.read.remote(offset, 4096))) if r.offset >= offset]
        assert chunk
        out.extend(as_recs(chunk))
        offset = chunk[-1].offset + 1
    return out


def checkpoint(log_dirs: list[Path], name: str) -> dict[tuple[str, int], int]:
    found: dict[tuple[str, int], int] = {}
    for directory in log_dirs:
        found.update(OffsetCheckpointFile(directory / name, read_only=True).read())
    return found


def restarts(handle: Any) -> int:
    """How often Ray restarted the actor (from the GCS actor table, see `alive_partition_actors`)."""
    return ray._private.state.actors(actor_id=handle._actor_id.hex())["NumRestarts"]


def alive_partition_actors() -> dict[str, list[int]]:
    """Actor name -> pids of its ALIVE instances, from the GCS actor table (the public state API needs the
    dashboard, which the test session turns off)."""
    found: dict[str, list[int]] = {}
    for entry in ray._private.state.actors().values():
        if entry["State"] == "ALIVE" and entry["ActorClassName"] == "PartitionLogActor":
            found.setdefault(entry["Name"], []).append(entry["Pid"])
    return found


@pytest.fixture(scope="module")
def broker(start_test_broker: StartBroker) -> tuple[Broker, list[Path]]:
    """Three log dirs; time-based flushes on (scheduler interval 200 ms) so recovery points move while running."""
    return start_test_broker(log_dirs_count=3, log_flush_scheduler_interval_ms="200", **ONE_ACTOR_PER_PARTITION)


def test_partitions_go_to_the_dir_with_the_fewest_and_the_manager_lists_them(broker: tuple[Broker, list[Path]]) -> None:
    _, log_dirs = broker
    lm = manager()
    assert call(lm.dirs.remote()) == {str(d.resolve()): None for d in log_dirs}
    for partition in range(7):
        placement = call(lm.create_partition.remote("spread", partition, {}))
        assert placement.topic == "spread" and placement.partition == partition
    again = call(lm.create_partition.remote("spread", 3, {}))  # idempotent: same dir, same actor
    assert again == next(p for p in call(lm.partitions.remote()) if (p.topic, p.partition) == ("spread", 3))
    counts = {str(d.resolve()): 0 for d in log_dirs}
    for placement in call(lm.partitions.remote()):
        counts[placement.directory] += 1
        assert (Path(placement.directory) / f"{placement.topic}-{placement.partition}").is_dir()
    assert sum(counts.values()) == 7 + 2  # with the two __consumer_offsets partitions
    assert max(counts.values()) - min(counts.values()) <= 1
    described = call(lm.describe.remote("spread"))
    assert [placement.partition for placement, _ in described] == list(range(7))
    assert all(state is not None and state.log_end_offset == 0 for _, state in described)
    assert call(lm.partition_count.remote()) == 9
    # Made behind the controller's back, these would be strays (a topic the cluster has not) to a restarted
    # log manager, which a later test restarts.
    assert call(lm.delete_partitions.remote("spread", [*range(7), 7])) == list(range(7))
    assert call(lm.partition_count.remote()) == 2


def test_scheduler_writes_checkpoints_and_flushes(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    call(client.controller.create_topic.remote("ckpt", 2, {"flush.ms": "100"}))
    for partition in range(2):
        fill(client.partition("ckpt", partition), "c", 5 + partition)
    expected = {("ckpt", 0): 15, ("ckpt", 1): 18}

    def checkpointed(name: str) -> Callable[[], bool]:
        return lambda: expected.items() <= checkpoint(log_dirs, name).items()

    wait_for(checkpointed(file_names.REPLICATION_OFFSET_CHECKPOINT), what="high watermarks")
    wait_for(checkpointed(file_names.RECOVERY_POINT_CHECKPOINT), what="recovery points (time-based flush)")
    handle = client.partition("ckpt", 0)
    call(handle.delete_records.remote(10))
    wait_for(lambda: checkpoint(log_dirs, file_names.LOG_START_OFFSET_CHECKPOINT).get(("ckpt", 0)) == 10)
    assert ("ckpt", 1) not in checkpoint(log_dirs, file_names.LOG_START_OFFSET_CHECKPOINT)


def test_retention_deletes_old_segments_on_schedule(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    config = {"retention.ms": "1000", "segment.bytes": "1024", "file.delete.delay.ms": "100"}
    call(client.controller.create_topic.remote("expiring", 1, config))
    handle = client.partition("expiring", 0)
    fill(handle, "old", 40)
    folder = Path(call(handle.state.remote()).directory)
    segments_before = sorted(folder.glob(f"*{file_names.LOG_SUFFIX}"))
    assert len(segments_before) > 3

    def expired() -> bool:
        state = call(handle.state.remote())
        files = sorted(p.name for p in folder.iterdir())
        return state.segments == 1 and not any(name.endswith(file_names.DELETED_SUFFIX) for name in files)

    wait_for(expired, what="retention to delete every closed segment")
    state = call(handle.state.remote())
    assert state.log_start_offset == state.first_segment_base == 120 and state.log_end_offset == 120
    assert [p.name for p in folder.glob(f"*{file_names.LOG_SUFFIX}")] == [file_names.log_file(folder, 120).name]
    assert checkpoint(log_dirs, file_names.LOG_START_OFFSET_CHECKPOINT).get(("expiring", 0)) in (None, 120)


def test_compaction_runs_on_schedule_and_checkpoints_the_cleaner_offset(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    config = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.1"}
    call(client.controller.create_topic.remote("compacted", 1, config))
    handle = client.partition("compacted", 0)
    written = fill(handle, "u", 100, per_batch=3, keys=5)
    latest = {record.key: record.value for record in written}

    def compacted() -> bool:
        # A pass may run while the records are still arriving; a later one catches up (backoff 500 ms).
        checkpointed = checkpoint(log_dirs, file_names.CLEANER_OFFSET_CHECKPOINT).get(("compacted", 0), 0)
        return checkpointed > 0 and len(read_all(handle)) < len(written) // 2

    wait_for(compacted, what="compaction and the cleaner-offset-checkpoint")
    survivors = read_all(handle)
    assert {record.key: record.value for record in survivors} == latest
    assert call(handle.offsets.remote())[2] == 300


def test_delete_topic_renames_then_removes_the_folder(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    call(client.controller.create_topic.remote("doomed", 1))
    fill(client.partition("doomed", 0), "d", 2)
    call(client.partition("doomed", 0).delete_records.remote(3))
    folder = next(d / "doomed-0" for d in log_dirs if (d / "doomed-0").is_dir())
    wait_for(lambda: checkpoint(log_dirs, file_names.LOG_START_OFFSET_CHECKPOINT).get(("doomed", 0)) == 3)
    call(client.controller.delete_topic.remote("doomed"))
    assert not folder.exists()
    for name in (file_names.LOG_START_OFFSET_CHECKPOINT, file_names.REPLICATION_OFFSET_CHECKPOINT):
        assert ("doomed", 0) not in checkpoint(log_dirs, name)  # rewritten by the delete, not the next pass
    assert not [name for name in alive_partition_actors() if name.startswith("partition:doomed:0:")]
    wait_for(lambda: not any(p.name.endswith("-delete") for d in log_dirs for p in d.iterdir()), what="folder delete")


def test_a_topic_deleted_and_created_again_at_once_starts_empty(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    for round_ in range(2):
        call(client.controller.create_topic.remote("reborn", 1))
        handle = client.partition("reborn", 0)
        assert call(handle.offsets.remote()) == (0, 0, 0), f"round {round_}"
        fill(handle, f"r{round_}", 1)
        call(client.controller.delete_topic.remote("reborn"))
    assert all(reason is None for reason in call(manager().dirs.remote()).values())


def test_altered_config_reaches_running_and_restarted_partition_actors(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    call(client.controller.create_topic.remote("altered", 1))
    call(client.controller.alter_topic_config.remote("altered", {"segment.bytes": "1024"}))
    handle = client.partition("altered", 0)
    fill(handle, "a", 12)
    segments = call(handle.state.remote()).segments
    assert segments > 1  # the running actor rolls at 1024 bytes
    pid = call(handle.state.remote()).pid
    ray.kill(handle, no_restart=False)
    wait_for(lambda: pid_of(handle) not in (None, pid), what="the partition actor to restart")
    fill(handle, "b", 12)
    assert call(handle.state.remote()).segments > segments  # Ray restarts it with its first arguments


def test_restarted_partition_actor_keeps_the_checkpointed_log_start(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    call(client.controller.create_topic.remote("trimmed", 1))
    handle = client.partition("trimmed", 0)
    written = fill(handle, "t", 5)
    assert call(handle.delete_records.remote(10)) == 10
    wait_for(lambda: checkpoint(log_dirs, file_names.LOG_START_OFFSET_CHECKPOINT).get(("trimmed", 0)) == 10)
    pid = call(handle.state.remote()).pid
    ray.kill(handle, no_restart=False)
    wait_for(lambda: pid_of(handle) not in (None, pid), what="the partition actor to restart")
    assert call(handle.offsets.remote()) == (10, 15, 15)  # deleted records do not come back
    with pytest.raises(OffsetOutOfRangeError):
        call(handle.read.remote(5))
    assert read_all(handle) == written[10:]


def test_killed_log_manager_comes_back_without_duplicating_partitions(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    call(client.controller.create_topic.remote("survivor", 2))
    written = fill(client.partition("survivor", 0), "s", 4)
    lm = manager()
    actors_before = alive_partition_actors()
    assert all(len(pids) == 1 for pids in actors_before.values())
    placements_before = call(lm.partitions.remote())
    ray.kill(lm, no_restart=False)
    wait_for(lambda: restarts(lm) == 1 and _answers(lm), what="the log manager to restart")
    assert call(lm.partitions.remote()) == placements_before
    assert alive_partition_actors() == actors_before  # the same processes: found again, not re-created
    assert read_all(client.partition("survivor", 0)) == written
    call(client.controller.create_topic.remote("after-restart", 1))
    fill(client.partition("after-restart", 0), "n", 1)
    for directory in log_dirs:
        (directory / file_names.REPLICATION_OFFSET_CHECKPOINT).unlink()
    wait_for(
        lambda: checkpoint(log_dirs, file_names.REPLICATION_OFFSET_CHECKPOINT).get(("after-restart", 0)) == 3,
        what="the restarted scheduler's checkpoint",
    )


def test_only_an_io_error_takes_a_log_dir_offline(start_test_broker: StartBroker) -> None:
    """Slow (~9 s): partition actors of their own (the dir's partitions go offline with their processes) and a broker
    started for it."""
    client, log_dirs = start_test_broker(
        log_dirs_count=2, log_flush_scheduler_interval_ms="100", **ONE_ACTOR_PER_PARTITION
    )
    lm = manager()
    online = {str(d.resolve()): None for d in log_dirs}
    call(client.controller.create_topic.remote("closed", 1, {"flush.ms": "0"}))
    closed = client.partition("closed", 0)
    final = call(closed.close.remote())  # a user with a raw handle closes the log under the broker
    assert call(closed.close.remote()) == final
    with pytest.raises(BrokerNotAvailableError):
        call(closed.append.remote(batch_bytes([Rec(b"k", b"v", now_ms())])))
    time.sleep(1.5)  # three retention and checkpoint passes, a dozen flush passes
    assert call(lm.dirs.remote()) == online
    holders = []
    for directory in log_dirs:
        (directory / "held-0").mkdir()
        holders.append(LogDirLock(directory / "held-0"))  # another process has the folder open
    try:
        with pytest.raises(LogDirLockedError) as raised:
            call(client.controller.create_topic.remote("held", 2))
    finally:
        for holder in holders:
            holder.release()
    assert type(raised.value).__module__ == "storage.errors"  # unwrapped through controller and log manager
    assert call(lm.dirs.remote()) == online
    assert "held" not in call(client.controller.list_topics.remote())  # rolled back, partition 1 too
    assert not [name for name in alive_partition_actors() if name.startswith("partition:held:")]
    assert not [entry for d in log_dirs for entry in d.glob("held-1")]
    call(client.controller.create_topic.remote("held", 2))
    assert {p.directory for p in call(lm.partitions.remote()) if p.topic == "held"} <= set(online)

    counts = {d.resolve(): 0 for d in log_dirs}
    for existing in call(lm.partitions.remote()):
        counts[Path(existing.directory)] += 1
    first_choice = min(counts, key=lambda d: (counts[d], list(counts).index(d)))
    (first_choice / "broken-0").write_bytes(b"")  # the folder cannot be made: an I/O error in that dir
    placement = call(lm.create_partition.remote("broken", 0, {}))
    assert Path(placement.directory) != first_choice
    dirs = call(lm.dirs.remote())
    assert dirs[str(first_choice)] is not None and dirs[placement.directory] is None
    call(client.controller.create_topic.remote("elsewhere", 2))
    assert {p.directory for p in call(lm.partitions.remote()) if p.topic == "elsewhere"} == {placement.directory}


def pid_of(handle: Any) -> int | None:
    """The partition actor's process id, None while it is restarting."""
    try:
        return call(handle.state.remote(), timeout_s=5).pid
    except (BrokerNotAvailableError, RequestTimedOutError):
        return None


def _answers(handle: Any) -> bool:
    try:
        call(handle.ping.remote(), timeout_s=5)
    except Exception:
        return False
    return True


@pytest.mark.reliability
@pytest.mark.skipif(
    not os.environ.get("RAYBROKER_SCALE_FIGURES"), reason="about a minute; set RAYBROKER_SCALE_FIGURES=1 to measure"
)
@pytest.mark.parametrize("count", [8, 32])
def test_scale_figures_per_partition_actor(start_test_broker: StartBroker, count: int) -> None:
    """Prints memory and start time per partition actor (figures for the report, not asserted)."""
    client, _ = start_test_broker(log_dirs_count=2, **ONE_ACTOR_PER_PARTITION)
    started = time.monotonic()
    call(client.controller.create_topic.remote(f"scale{count}", count), timeout_s=600)
    elapsed = time.monotonic() - started
    pids = [pids[0] for name, pids in alive_partition_actors().items() if name.startswith(f"partition:scale{count}:")]
    assert len(pids) == count
    rss = uss = 0
    for pid in pids:
        info = psutil.Process(pid).memory_full_info()
        rss += info.rss
        uss += info.uss
    mib = 1024 * 1024
    per_uss = uss / count / mib
    print(
        f"\n{count} partition actors: create_topic {elapsed:.1f} s ({elapsed / count:.2f} s each), "
        f"RSS {rss / count / mib:.0f} MiB each, USS {per_uss:.0f} MiB each; "
        f"24 GiB at this USS hosts ~{24 * 1024 / per_uss:.0f} partitions (os.cpu_count()={os.cpu_count()})"
    )


def test_partition_of_a_topic_deleted_while_its_broker_was_down_is_not_loaded_again(
    start_test_broker: StartBroker, tmp_path: Path
) -> None:
    """The restarted broker renames the folder stray instead of loading it. That the stray folder is deleted once
    `log.segment.delete.delay.ms` passes is the log manager's own test (tests/storage/logdir/test_log_manager.py, on
    a MockClock); here the delay outlasts the test, so the stray folder is still there to be seen however slow the
    restart."""
    log_dirs = [tmp_path / "dir0"]
    delete_delay = {"log_segment_delete_delay_ms": "600000"}
    client, _ = start_test_broker(log_dirs=log_dirs, **delete_delay)
    call(client.controller.create_topic.remote("gone", 1))
    fill(client.partition("gone", 0), "g", 2)
    folder = log_dirs[0] / "gone-0"
    held_while_down = tmp_path / "held-while-down"
    shutil.copytree(folder, held_while_down)
    call(client.controller.delete_topic.remote("gone"))
    shutil.copytree(held_while_down, folder)  # the folder a broker that missed the delete still holds

    start_test_broker(log_dirs=log_dirs, **delete_delay)

    assert not folder.exists()
    strays = [entry for entry in log_dirs[0].iterdir() if file_names.parse_stray_dir_name(entry.name) == ("gone", 0)]
    assert len(strays) == 1
    assert "gone" not in {placement.topic for placement in call(manager().partitions.remote())}
    assert not [name for name in alive_partition_actors() if name.startswith("partition:gone:0:")]
