"""`cluster.spark.planning` without Ray: packing offset ranges into Spark tasks, Spark's offset JSON, and options
refused before any partition is asked.

The planning against a live broker (`plan_read`) is tested through the DataFrames of `test_kafka_source.py`, the
read-planning core it translates its options for in `tests/cluster/records/test_read_plan.py`."""

from __future__ import annotations

import pytest

from cluster.records.offset_ranges import OffsetRange, group_ranges
from cluster.spark.planning import offsets_json, parse_partition_offsets, plan_read
from storage.errors import InvalidRequestError


def test_group_ranges_packs_the_biggest_first_onto_the_least_loaded_task() -> None:
    sizes = [50, 10, 40, 30, 20]
    ranges = [OffsetRange("t", p, 0, size) for p, size in enumerate(sizes)]
    tasks = group_ranges(ranges, 2)
    loads = sorted(sum(ranges[i].size for i in task) for task in tasks)
    assert loads == [70, 80]
    assert sorted(i for task in tasks for i in task) == list(range(len(ranges)))
    assert all(list(task) == sorted(task) for task in tasks)
    assert group_ranges(ranges, 0) == ()
    assert len(group_ranges(ranges[:1], 3)) == 1


def test_offsets_json_round_trips_through_the_parser() -> None:
    offsets = {("b", 1): 7, ("a", 0): -2, ("a", 10): 3}
    text = offsets_json(offsets)
    assert text == '{"a":{"0":-2,"10":3},"b":{"1":7}}'
    assert parse_partition_offsets(text, "startingOffsets") == offsets
    assert parse_partition_offsets({"a": {"0": 5}}, "startingOffsets") == {("a", 0): 5}


@pytest.mark.parametrize("spec", ['{"t":{"0":true}}', '{"t":{"0":"5"}}', "{not json", '["t"]'])
def test_malformed_offset_json_is_an_invalid_request(spec: str) -> None:
    with pytest.raises(InvalidRequestError, match="startingOffsets"):
        parse_partition_offsets(spec, "startingOffsets")


@pytest.mark.parametrize("value", ["maybe", "", 1, None])
def test_fail_on_data_loss_takes_a_bool_or_sparks_true_false(value: object) -> None:
    """Checked before any broker is asked: "false" as Spark's option string must not read as a truthy string."""
    with pytest.raises(InvalidRequestError, match="failOnDataLoss must be true or false"):
        plan_read(topics="t", failOnDataLoss=value)  # type: ignore[arg-type]
