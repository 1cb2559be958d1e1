"""`cluster.data.read_planning` without Ray: bounds in read_kafka's forms translated into the read-planning core's
request and resolved against partition snapshots (the oracle: the offsets each form means by its definition), the
typed errors of a bad read in `read_topic`'s words, and read tasks cut by block size and by the parallelism Ray
Data asks for. The core's own rules are tested in `tests/cluster/records/test_read_plan.py`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cluster.data.read_planning import MIN_TASK_BYTES, check_bound, plan_request, task_groups, timestamp_ms
from cluster.records.offset_ranges import OffsetRange
from cluster.records.read_plan import (
    EARLIEST,
    LATEST,
    AtTimestamp,
    PartitionSnapshot,
    PlannedRange,
    TopicReadPlan,
    plan_ranges,
)
from storage.errors import InvalidRequestError, OffsetOutOfRangeError, UnknownTopicOrPartitionError

NOW_MS = 1_700_000_000_000
# Partition 0: offsets 10..100 (log start 10), 100 bytes per offset; partition 1: empty at 5.
SNAPSHOTS = {
    ("t", 0): PartitionSnapshot("node-a", 10, 100, 100, 9_000, 10, 100),
    ("t", 1): PartitionSnapshot("node-b", 5, 5, 5, 0, 5, 5),
}
TPS = sorted(SNAPSHOTS)


def plan(
    start: object = "earliest", end: object = "latest", *, fail: bool = True, found: object = None
) -> TopicReadPlan:
    by_time = found if isinstance(found, dict) else {}
    return plan_ranges(SNAPSHOTS, plan_request(TPS, start, end, "read_committed", fail), by_time)  # type: ignore[arg-type]


def test_earliest_and_latest_are_the_cores_earliest_and_latest_of_every_partition() -> None:
    request = plan_request(TPS, "earliest", "latest", "read_committed", True)
    assert request.start == dict.fromkeys(TPS, EARLIEST)
    assert request.end == dict.fromkeys(TPS, LATEST)
    assert [p.range for p in plan().ranges] == [OffsetRange("t", 0, 10, 100, start_is_earliest=True)]


def test_ints_and_per_partition_dicts_fall_back_to_earliest_and_latest_as_read_kafka_does() -> None:
    # An int is that offset of every partition: past partition 1's end.
    with pytest.raises(InvalidRequestError, match="t-1: start offset 20 is after the end offset 5"):
        plan(20, "latest")
    one = plan_ranges({("t", 0): SNAPSHOTS[("t", 0)]}, plan_request([("t", 0)], 20, 50, "read_uncommitted", True), {})
    assert [p.range for p in one.ranges] == [OffsetRange("t", 0, 20, 50)]
    planned = plan({"t": {0: 20}}, {"t": {0: 60}})
    assert planned.start_offsets == {("t", 0): 20, ("t", 1): 5}
    assert planned.end_offsets == {("t", 0): 60, ("t", 1): 5}
    assert [p.range for p in planned.ranges] == [OffsetRange("t", 0, 20, 60)]


def test_a_datetime_bound_is_the_first_offset_at_or_after_it_or_the_end_when_none_is_that_new() -> None:
    moment = datetime(2023, 11, 14, tzinfo=UTC)
    request = plan_request(TPS, moment, moment, "read_committed", True)
    assert set(request.start.values()) == set(request.end.values()) == {AtTimestamp(timestamp_ms(moment))}
    found = {("start", ("t", 0)): 40, ("start", ("t", 1)): None, ("end", ("t", 0)): None, ("end", ("t", 1)): None}
    planned = plan(moment, moment, found=found)
    assert planned.start_offsets == {("t", 0): 40, ("t", 1): 5}
    assert planned.end_offsets == {("t", 0): 100, ("t", 1): 5}


def test_naive_datetimes_are_utc_and_ms_are_exact() -> None:
    aware = datetime.fromtimestamp(NOW_MS // 1000, tz=UTC) + timedelta(milliseconds=123)
    assert timestamp_ms(aware) == NOW_MS + 123
    assert timestamp_ms(aware.replace(tzinfo=None)) == NOW_MS + 123
    assert timestamp_ms(aware.astimezone(timezone(timedelta(hours=5)))) == NOW_MS + 123


def test_a_start_below_the_log_start_is_data_loss_unless_told_to_skip() -> None:
    with pytest.raises(OffsetOutOfRangeError, match=r"below the log start offset 10: .* fail_on_data_loss=False"):
        plan({"t": {0: 3}})
    assert plan({"t": {0: 3}}, fail=False).start_offsets[("t", 0)] == 10


@pytest.mark.parametrize(
    ("start", "end", "error", "match"),
    [
        ("earliest", {"t": {0: 101}}, OffsetOutOfRangeError, "past the last offset a read_committed read"),
        ({"t": {0: 70}}, {"t": {0: 60}}, InvalidRequestError, "start offset 70 is after the end offset 60"),
        ("latest", {"t": {0: 50}}, InvalidRequestError, "start offset 100 is after"),
    ],
)
def test_ranges_that_cannot_be_read_are_refused(start: object, end: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        plan(start, end)


@pytest.mark.parametrize(
    ("bound", "side", "error", "match"),
    [
        ("newest", "start", InvalidRequestError, "must be earliest, latest"),
        ("earliest", "end", InvalidRequestError, "cannot be earliest"),
        (-1, "start", InvalidRequestError, "must be an int >= 0"),
        (True, "end", InvalidRequestError, "must be an int >= 0"),
        ({"t": {0: -5}}, "start", InvalidRequestError, "of t-0 must be an int >= 0"),
        ({"t": {7: 5}}, "start", UnknownTopicOrPartitionError, "t-7"),
        ({"other": {0: 5}}, "end", UnknownTopicOrPartitionError, "other-0"),
        ({"t": [0, 1]}, "end", InvalidRequestError, "partition: offset"),
        (datetime.fromtimestamp(NOW_MS / 1000 + 60, tz=UTC), "end", InvalidRequestError, "in the future"),
    ],
)
def test_malformed_bounds_are_refused_before_any_partition_is_asked(
    bound: object, side: str, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        check_bound(bound, side, TPS, NOW_MS)


def test_a_datetime_up_to_now_is_a_fine_bound() -> None:
    check_bound(datetime.fromtimestamp(NOW_MS / 1000, tz=UTC), "end", TPS, NOW_MS)


def planned(partition: int, offsets: int, estimated_bytes: int, node: str = "n") -> PlannedRange:
    return PlannedRange(OffsetRange("t", partition, 0, offsets), node, estimated_bytes)


def covered(groups: list[tuple[PlannedRange, ...]]) -> list[tuple[int, int]]:
    return sorted((p.range.partition, o) for group in groups for p in group for o in range(p.range.start, p.range.end))


def test_a_partition_larger_than_a_block_is_cut_into_block_sized_ranges_read_in_parallel() -> None:
    hot = planned(0, 1000, 1000 * 1000)
    groups = task_groups([hot], parallelism=100, max_block_bytes=250 * 1000)
    assert [sum(p.range.size for p in group) for group in groups] == [250] * 4
    assert all(len(group) == 1 and group[0].estimated_bytes == 250_000 for group in groups)
    assert covered(groups) == [(0, offset) for offset in range(1000)]


def test_more_tasks_when_asked_but_no_piece_under_the_minimum() -> None:
    big = planned(0, 1000, 8 * MIN_TASK_BYTES)
    groups = task_groups([big], parallelism=100, max_block_bytes=None)
    assert len(groups) == 8
    assert all(group[0].estimated_bytes == MIN_TASK_BYTES for group in groups)
    small = planned(1, 1000, MIN_TASK_BYTES)
    assert len(task_groups([small], parallelism=100, max_block_bytes=None)) == 1


def test_more_ranges_than_tasks_asked_are_packed_heaviest_first() -> None:
    ranges = [planned(p, 10, size) for p, size in enumerate([50, 40, 30, 20, 10, 10])]
    groups = task_groups(ranges, parallelism=2, max_block_bytes=None)
    assert sorted(sum(p.estimated_bytes for p in group) for group in groups) == [80, 80]
    assert covered(groups) == covered([tuple(ranges)])
    assert task_groups(ranges, parallelism=2, max_block_bytes=None) == groups
