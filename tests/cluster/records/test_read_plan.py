"""`cluster.records.read_plan` without Ray: positions resolved against partition snapshots (the oracle: the offsets
each position means by its definition), the data-loss rule, the typed errors of a range that cannot be read in a
front end's words, the ranges' estimated bytes and nodes, and the cut into `min_ranges` ranges."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from cluster.records.offset_ranges import OffsetRange
from cluster.records.read_plan import (
    EARLIEST,
    LATEST,
    AtTimestamp,
    Dialect,
    PartitionSnapshot,
    PlannedRange,
    PlanRequest,
    Position,
    TopicReadPlan,
    plan_ranges,
    split_ranges,
)
from storage.errors import InvalidRequestError, OffsetOutOfRangeError, RaybrokerError
from storage.topic_partition import TopicPartition

# Partition 0: offsets 10..100 (log start 10), 100 bytes per offset; partition 1: empty at 5.
SNAPSHOTS = {
    ("t", 0): PartitionSnapshot("node-a", 10, 100, 100, 9_000, 10, 100),
    ("t", 1): PartitionSnapshot("node-b", 5, 5, 5, 0, 5, 5),
}
TPS = sorted(SNAPSHOTS)
WORDS = Dialect("start offset", "end offset", "Skip them so.", OffsetOutOfRangeError, "Start at the end so.")


def sides(position: Position | Mapping[TopicPartition, Position], default: Position) -> dict[TopicPartition, Position]:
    """One position for every partition, or some partitions' positions and `default` for the others."""
    if isinstance(position, Mapping):
        return {tp: position.get(tp, default) for tp in TPS}
    return dict.fromkeys(TPS, position)


def plan(
    start: Position | Mapping[TopicPartition, Position] = EARLIEST,
    end: Position | Mapping[TopicPartition, Position] = LATEST,
    *,
    fail: bool = True,
    found: Mapping[tuple[str, TopicPartition], int | None] | None = None,
    words: Dialect = WORDS,
    fail_without_start_match: bool = False,
    min_ranges: int | None = None,
) -> TopicReadPlan:
    request = PlanRequest(
        sides(start, EARLIEST),
        sides(end, LATEST),
        "read_committed",
        fail,
        words,
        fail_without_start_match=fail_without_start_match,
        min_ranges=min_ranges,
    )
    return plan_ranges(SNAPSHOTS, request, found or {})


def test_earliest_to_latest_is_every_partition_from_its_log_start_to_its_high_watermark() -> None:
    planned = plan()
    assert planned.start_offsets == {("t", 0): 10, ("t", 1): 5}
    assert planned.end_offsets == {("t", 0): 100, ("t", 1): 5}
    (only,) = planned.ranges
    assert only.range == OffsetRange("t", 0, 10, 100, start_is_earliest=True)
    assert only.node == "node-a"
    # 90 offsets of 100 log bytes each, plus the Arrow columns' 32 bytes and the topic's 1 byte a row.
    assert only.estimated_bytes == 90 * (100 + 32 + 1)
    assert planned.by_node() == {"node-a": (only,)}
    assert planned.leaders == {("t", 0): "node-a", ("t", 1): "node-b"}
    assert planned.next_start() == {"t": {0: 100, 1: 5}}


def test_offsets_are_taken_as_given_and_latest_starts_an_empty_read() -> None:
    planned = plan({("t", 0): 20}, {("t", 0): 60})
    assert planned.start_offsets == {("t", 0): 20, ("t", 1): 5}
    assert planned.end_offsets == {("t", 0): 60, ("t", 1): 5}
    assert [p.range for p in planned.ranges] == [OffsetRange("t", 0, 20, 60)]
    assert plan(LATEST).ranges == ()
    assert plan(LATEST).start_offsets == {("t", 0): 100, ("t", 1): 5}


def test_a_timestamp_is_the_first_offset_at_or_after_it_or_the_end_when_none_is_that_new() -> None:
    found = {("start", ("t", 0)): 40, ("start", ("t", 1)): None, ("end", ("t", 0)): None, ("end", ("t", 1)): None}
    planned = plan(AtTimestamp(1_700_000_000_000), AtTimestamp(1_700_000_000_000), found=found)
    assert planned.start_offsets == {("t", 0): 40, ("t", 1): 5}
    assert planned.end_offsets == {("t", 0): 100, ("t", 1): 5}
    # A record found past where the read ends (above the last stable offset) ends the read there.
    assert plan(AtTimestamp(0), found={("start", ("t", 0)): 120}).start_offsets[("t", 0)] == 100


def test_a_start_timestamp_with_no_record_that_new_fails_when_the_front_end_asks() -> None:
    found = {("start", ("t", 0)): 40, ("start", ("t", 1)): None}
    with pytest.raises(InvalidRequestError, match=r"no offset of t-1 .* at or after 7 \(Start at the end so\.\)"):
        plan(AtTimestamp(7), found=found, fail_without_start_match=True)
    # An end timestamp never fails: the read ends at the end.
    ends = {("end", ("t", 0)): None, ("end", ("t", 1)): None}
    assert plan(EARLIEST, AtTimestamp(7), found=ends, fail_without_start_match=True).end_offsets[("t", 0)] == 100


def test_a_start_below_the_log_start_is_data_loss_unless_told_to_skip() -> None:
    with pytest.raises(OffsetOutOfRangeError, match=r"below the log start offset 10: .* Skip them so\."):
        plan({("t", 0): 3})
    assert plan({("t", 0): 3}, fail=False).start_offsets[("t", 0)] == 10
    # Skipped up to the log start, but never past the end.
    assert plan({("t", 0): 3}, {("t", 0): 8}, fail=False).start_offsets[("t", 0)] == 8


@pytest.mark.parametrize(
    ("start", "end", "error", "match"),
    [
        (EARLIEST, {("t", 0): 101}, OffsetOutOfRangeError, "t-0: end offset 101 is past the last offset a read_c"),
        ({("t", 0): 70}, {("t", 0): 60}, InvalidRequestError, "t-0: start offset 70 is after the end offset 60"),
        (LATEST, {("t", 0): 50}, InvalidRequestError, "start offset 100 is after"),
        (20, LATEST, InvalidRequestError, "t-1: start offset 20 is after the end offset 5"),
    ],
)
def test_ranges_that_cannot_be_read_are_refused(start: object, end: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        plan(start, end)  # type: ignore[arg-type]


def test_the_front_end_names_the_bounds_and_the_error_of_an_end_past_the_readable_end() -> None:
    spark = Dialect("starting offset", "ending offset", "", InvalidRequestError)
    with pytest.raises(InvalidRequestError, match="ending offset 101 is past the last offset") as refused:
        plan(EARLIEST, {("t", 0): 101}, words=spark)
    assert refused.value.offset == 101
    assert not isinstance(refused.value, OffsetOutOfRangeError)


@pytest.mark.parametrize(
    ("start", "end", "min_ranges", "match"),
    [
        ({("t", 0): 1}, {("t", 1): 2}, None, "same partitions"),
        ({("t", 0): -3}, {("t", 0): 5}, None, "must be an offset >= 0, -1 or -2"),
        ({("t", 0): True}, {("t", 0): 5}, None, "must be an offset"),
        ({("t", 0): AtTimestamp(-1)}, {("t", 0): 5}, None, "ms >= 0"),
        ({("t", 0): 1}, {("t", 0): 5}, 0, "min_ranges must be a positive int"),
    ],
)
def test_a_malformed_request_is_refused(start: dict, end: dict, min_ranges: int | None, match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match):
        PlanRequest(start, end, "read_committed", True, WORDS, min_ranges=min_ranges)
    with pytest.raises(RaybrokerError, match="isolation must be"):
        PlanRequest({}, {}, "read_everything", True, WORDS)


def test_split_ranges_cuts_in_proportion_and_covers_every_offset_once() -> None:
    ranges = [
        PlannedRange(OffsetRange("t", 0, 0, 900, start_is_earliest=True), "a", 9000),
        PlannedRange(OffsetRange("t", 1, 10, 110), "b", 1000),
    ]
    pieces = split_ranges(ranges, 10)
    assert [(p.range.partition, p.range.size, p.node, p.estimated_bytes) for p in pieces] == [
        (0, 100, "a", 1000)
    ] * 9 + [(1, 100, "b", 1000)]
    covered = sorted((p.range.partition, offset) for p in pieces for offset in range(p.range.start, p.range.end))
    assert covered == sorted((r.range.partition, o) for r in ranges for o in range(r.range.start, r.range.end))
    # Only the first piece of a range that started at `earliest` keeps the late-bound start.
    assert [p.range.start_is_earliest for p in pieces if p.range.partition == 0] == [True] + [False] * 8


def test_split_ranges_leaves_enough_ranges_alone() -> None:
    ranges = [PlannedRange(OffsetRange("t", p, 0, 10), "n", 10) for p in range(4)]
    assert split_ranges(ranges, 4) == ranges
    assert split_ranges(ranges, None) == ranges


def test_min_ranges_cuts_the_planned_ranges() -> None:
    planned = plan(min_ranges=3)
    assert [p.range for p in planned.ranges] == [
        OffsetRange("t", 0, 10, 40, start_is_earliest=True),
        OffsetRange("t", 0, 40, 70),
        OffsetRange("t", 0, 70, 100),
    ]
    assert planned.end_offsets == {("t", 0): 100, ("t", 1): 5}
