"""A broker's copy of the metadata log: it takes the controller's batches byte for byte at its end offset only,
refuses a controller older than one it followed (also after it is reopened), and truncates where told."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.clock import MockClock
from storage.errors import RecordTooLargeError, StaleControllerEpochError
from storage.logdir.metadata_mirror import (
    METADATA_MAX_BATCH_BYTES,
    NO_EPOCH,
    MetadataMirror,
    MirrorState,
    open_metadata_log,
    read_whole_batches,
)
from storage.partition.log import Log
from storage.records.record_batch import RecordBatchBuilder, iter_batches


def controller_batches(log: Log, epoch: int, keys: list[str]) -> tuple[int, bytes]:
    """`keys` appended by a controller log in `epoch`, one batch each; their offset and bytes as it sends them."""
    log.become_leader(epoch)
    first = log.log_end_offset
    for key in keys:
        builder = RecordBatchBuilder()
        builder.append(key.encode(), b"{}", timestamp=1)
        log.append(builder.build())
    return first, bytes(log.read(first, 1 << 20).records)


def test_a_copy_takes_batches_at_its_end_only_and_keeps_their_bytes_and_epochs(tmp_path: Path) -> None:
    clock = MockClock()
    controller = open_metadata_log(tmp_path / "controller", clock)
    mirror = MetadataMirror(tmp_path / "broker", clock)
    assert mirror.state() == MirrorState(0, NO_EPOCH)
    offset, batches = controller_batches(controller, 3, ["cluster", "topic/a"])
    assert mirror.append(3, offset + 1, batches) == MirrorState(0, NO_EPOCH), "not at its end: nothing appended"
    assert mirror.append(3, offset, batches) == MirrorState(2, 3)
    assert mirror.read(0, 1 << 20) == bytes(controller.read(0, 1 << 20).records)
    assert mirror.read(2, 1 << 20) == b""
    assert mirror.end_offset_for_epoch(3) == (3, 2)
    controller.close()
    mirror.close()


def test_an_older_controller_is_refused_also_after_the_copy_is_reopened(tmp_path: Path) -> None:
    clock = MockClock()
    controller = open_metadata_log(tmp_path / "controller", clock)
    mirror = MetadataMirror(tmp_path / "broker", clock)
    offset, batches = controller_batches(controller, 2, ["controller"])
    mirror.append(2, offset, batches)
    with pytest.raises(StaleControllerEpochError):
        mirror.append(1, 1, batches)
    with pytest.raises(StaleControllerEpochError):
        mirror.truncate_to(1, 0)
    mirror.close()
    reopened = MetadataMirror(tmp_path / "broker", clock)
    with pytest.raises(StaleControllerEpochError):
        reopened.truncate_to(1, 0)
    assert reopened.state() == MirrorState(1, 2)
    assert reopened.truncate_to(4, 0) == MirrorState(0, NO_EPOCH)
    with pytest.raises(StaleControllerEpochError):
        reopened.append(3, 0, batches)
    controller.close()
    reopened.close()


def test_a_topic_of_ten_thousand_partitions_fits_one_metadata_record_and_the_copy_takes_it(tmp_path: Path) -> None:
    """A topic is one metadata record (~330 bytes a partition): 10,000 partitions are ~3.3 MB, past a topic's
    default `max.message.bytes` (1 MiB) but within KRaft's 8 MiB batches; a record past 8 MiB is still refused."""
    clock = MockClock()
    controller = open_metadata_log(tmp_path / "controller", clock)
    mirror = MetadataMirror(tmp_path / "broker", clock)
    topic = b"p" * (330 * 10_000)
    controller.become_leader(1)
    builder = RecordBatchBuilder()
    builder.append(b"topic/large", topic, timestamp=1)
    assert controller.append(builder.build()).last_offset == 0
    assert mirror.append(1, 0, bytes(controller.read(0, 1 << 20).records)) == MirrorState(1, 1)
    (record,) = next(iter_batches(mirror.read(0, 1 << 20))).records()
    assert record.value == topic
    too_large = RecordBatchBuilder()
    too_large.append(b"topic/too-large", b"p" * METADATA_MAX_BATCH_BYTES, timestamp=1)
    with pytest.raises(RecordTooLargeError):
        controller.append(too_large.build())
    controller.close()
    mirror.close()


def test_a_read_that_would_end_inside_a_batch_answers_the_whole_batches_before_it(tmp_path: Path) -> None:
    """A log's read of `max_bytes` may end inside a batch (Kafka's fetch semantics); what a copy is sent, and what
    it answers a controller adopting it, ends at a batch's end, so the other side can append it."""
    clock = MockClock()
    controller = open_metadata_log(tmp_path / "controller", clock)
    _, sent = controller_batches(controller, 1, [f"topic/t{index}" for index in range(4)])
    sizes = [batch.size_in_bytes for batch in iter_batches(sent)]
    two_and_a_half = sizes[0] + sizes[1] + sizes[2] // 2
    assert len(controller.read(0, two_and_a_half).records) == two_and_a_half, "the log's own read ends mid-batch"
    assert read_whole_batches(controller, 0, two_and_a_half) == sent[: sizes[0] + sizes[1]]
    assert read_whole_batches(controller, 0, 1) == sent[: sizes[0]], "the first batch even above max_bytes"
    assert read_whole_batches(controller, 4, 1 << 20) == b""
    mirror = MetadataMirror(tmp_path / "broker", clock)
    mirror.append(1, 0, sent)
    assert mirror.read(1, sizes[1] + sizes[2] - 1) == sent[sizes[0] : sizes[0] + sizes[1]]
    controller.close()
    mirror.close()
