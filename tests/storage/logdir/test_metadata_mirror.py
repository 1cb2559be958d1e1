"""A broker's copy of the metadata log: it takes the controller's batches byte for byte at its end offset only,
refuses a controller older than one it followed (also after it is reopened), and truncates where told."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.clock import MockClock
from storage.errors import StaleControllerEpochError
from storage.logdir.metadata_mirror import NO_EPOCH, MetadataMirror, MirrorState, open_metadata_log
from storage.partition.log import Log
from storage.records.record_batch import RecordBatchBuilder


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
