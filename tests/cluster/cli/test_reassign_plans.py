"""`raybroker reassign`'s files and lines without a cluster (`cluster.cli.reassign_plans`): a plan is refused with
the message kafka-reassign-partitions.sh gives for the same file (ReassignPartitionsCommand's checks), before
anything is changed; moves and their states print as that tool prints them; options the tool refuses for an action
are a usage error. The actions against a cluster, line for line against Kafka's tool on Apache Kafka, are in
`tests/cluster/protocol/test_differential_admin_tools.py`; a move between nodes in
`tests/actors/test_zz_replication.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.cli.main import EXIT_USAGE, main
from cluster.cli.reassign_plans import (
    Move,
    PlanError,
    cancellable,
    list_lines,
    parse_broker_list,
    parse_reassignment,
    parse_topics,
    reassignment_json,
    reassignment_throttles,
    verify_lines,
)


def plan(*partitions: dict[str, object], version: int = 1) -> str:
    return json.dumps({"version": version, "partitions": list(partitions)})


def test_a_plan_reads_as_each_partitions_target_replicas_and_a_broker_without_node_id_by_its_ray_id() -> None:
    read = parse_reassignment(
        plan(
            {"topic": "a", "partition": 1, "replicas": [2, 1], "log_dirs": ["any", "any"]},
            {"topic": "b", "partition": 0, "replicas": ["0cf7f7e5"]},
        )
    )
    assert read == {("a", 1): (2, 1), ("b", 0): ("0cf7f7e5",)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (plan(), "Partition reassignment list cannot be empty"),
        (plan({"topic": "a", "partition": 0, "replicas": []}), "Partition replica list cannot be empty"),
        (
            plan({"topic": "a", "partition": 0, "replicas": [1]}, {"topic": "a", "partition": 0, "replicas": [2]}),
            "Partition reassignment contains duplicate topic partitions: a-0",
        ),
        (
            plan({"topic": "a", "partition": 0, "replicas": [1, 2, 1]}),
            "Partition replica lists may not contain duplicate entries: a-0 contains multiple entries for 1",
        ),
        (
            plan({"topic": "a", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}),
            "Size of replicas list [1, 2] is different from size of log dirs list [any] for partition a-0",
        ),
        (plan({"topic": "a", "partition": 0, "replicas": [1]}, version=2), "Not supported version field value 2"),
    ],
)
def test_a_plan_kafkas_tool_refuses_is_refused_with_its_message(text: str, message: str) -> None:
    with pytest.raises(PlanError) as refused:
        parse_reassignment(text)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        plan({"topic": "a", "partition": "0", "replicas": [1]}),
        plan({"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["/data/kafka-1"]}),
    ],
)
def test_a_file_that_is_no_plan_or_names_a_log_dir_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(PlanError) as refused:
        parse_reassignment(text)
    assert "\n" not in str(refused.value)


def test_topics_and_broker_lists_repeat_nothing() -> None:
    assert parse_topics(json.dumps({"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]})) == ["a", "b"]
    with pytest.raises(PlanError, match=r"^List of topics to reassign contains duplicate entries: \[a\]$"):
        parse_topics(json.dumps({"topics": [{"topic": "a"}, {"topic": "a"}]}))
    assert parse_broker_list("1, 2,0cf7f7e5") == [1, 2, "0cf7f7e5"]
    with pytest.raises(PlanError, match=r"^Broker list contains duplicate entries: \[2\]$"):
        parse_broker_list("1,2,2")


def test_an_assignment_prints_as_kafkas_compact_json_sorted_by_topic_then_partition() -> None:
    printed = reassignment_json({("b", 0): (1,), ("a", 10): (2, 1), ("a", 2): ("0cf7f7e5",), ("é", 0): (1,)})
    assert printed == (
        '{"version":1,"partitions":['
        '{"topic":"a","partition":2,"replicas":["0cf7f7e5"],"log_dirs":["any"]},'
        '{"topic":"a","partition":10,"replicas":[2,1],"log_dirs":["any","any"]},'
        '{"topic":"b","partition":0,"replicas":[1],"log_dirs":["any"]},'
        '{"topic":"é","partition":0,"replicas":[1],"log_dirs":["any"]}]}'
    )
    assert parse_reassignment(printed) == {("a", 2): ("0cf7f7e5",), ("a", 10): (2, 1), ("b", 0): (1,), ("é", 0): (1,)}


def test_moves_list_verify_and_cancel_as_kafkas_tool_tells_them() -> None:
    moves = {("t", 1): Move((1, 2, 3), adding=(3,), removing=(1,)), ("t", 0): Move((1, 2), adding=(2,))}
    assert list_lines({}) == ["No partition reassignments found."]
    assert list_lines(moves) == [
        "Current partition reassignments:",
        "t-0: replicas: 1,2. adding: 2.",
        "t-1: replicas: 1,2,3. adding: 3. removing: 1.",
    ]
    target = {("t", 0): (1, 2), ("t", 1): (2, 3), ("u", 0): (2,), ("v", 0): (1,)}
    current = {("t", 0): (1,), ("t", 1): (1, 2, 3), ("u", 0): (2,), ("v", 0): (3,)}
    assert verify_lines(target, moves, current) == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is still in progress.",
        "Reassignment of partition t-1 is still in progress.",
        "Reassignment of partition u-0 is completed.",
        "There is no active reassignment of partition v-0, but replica set is 3 rather than 1.",
    ]
    # Kafka's tool cancels a move that removes a replica, and leaves one that only adds replicas to go on.
    assert cancellable(moves, target) == [("t", 1)]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (["--execute"], "--execute needs --reassignment-json-file"),
        (["--generate", "--broker-list", "1"], "--generate needs --topics-to-move-json-file"),
        (["--list", "--additional"], 'Option "--additional" can\'t be used with action "--list"'),
        (
            ["--verify", "--reassignment-json-file", "p.json", "--disallow-replication-factor-change"],
            'Option "--disallow-replication-factor-change" can\'t be used with action "--verify"',
        ),
        (
            ["--verify", "--reassignment-json-file", "p.json", "--throttle", "5"],
            'Option "--throttle" can\'t be used with action "--verify"',
        ),
        (
            ["--execute", "--reassignment-json-file", "p.json", "--preserve-throttles"],
            'Option "--preserve-throttles" can\'t be used with action "--execute"',
        ),
    ],
)
def test_options_an_action_does_not_take_are_a_usage_error(
    arguments: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["reassign", *arguments]) == EXIT_USAGE
    assert capsys.readouterr().err == f"raybroker: error: {error}\n"


def test_a_plan_file_that_does_not_parse_exits_1_in_one_line_before_reaching_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "plan.json"
    broken.write_text(plan(), encoding="utf-8")
    assert main(["reassign", "--execute", "--reassignment-json-file", str(broken)]) == 1
    assert capsys.readouterr().err == "raybroker: error: Partition reassignment list cannot be empty\n"
    assert main(["reassign", "--verify", "--reassignment-json-file", str(tmp_path / "missing.json")]) == 1
    assert capsys.readouterr().err.startswith("raybroker: error: [Errno 2] No such file or directory")


def test_throttles_name_each_moves_sources_and_added_replicas_as_kafkas_tool_does() -> None:
    """Kafka's `calculateProposedMoveMap`: a partition's sources are its replicas now (or, while it moves, those it
    had before), its destinations the planned replicas it lacks; a move under way that the plan leaves alone is
    throttled too; brokers named by a Ray node id (no Kafka node.id) are left out."""
    current = {("a", 0): (1, 2), ("a", 1): (2, 3), ("b", 0): (1,)}
    moves = {("a", 1): Move((2, 3, 4), adding=(4,), removing=(3,)), ("c", 0): Move((5, 6), adding=(6,))}
    plan = {("a", 0): (3, 1), ("a", 1): (4, 1), ("b", 0): (1, "ray-node")}
    throttles = reassignment_throttles(plan, moves, current)
    assert throttles.leader == {"a": "0:1,0:2,1:2,1:3", "b": "0:1", "c": "0:5"}
    assert throttles.follower == {"a": "0:3,1:1,1:4", "b": "", "c": "0:6"}
    assert throttles.brokers == (1, 2, 3, 4, 5, 6)
