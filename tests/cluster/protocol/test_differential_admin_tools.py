"""Apache Kafka's own admin tools against Apache Kafka 3.9.1 and against raybroker's listener, their answers compared
(exit code, printed lines) and what they left behind.

- kafka-consumer-groups.sh `--delete-offsets` (OffsetDelete): an Empty group (its consumer only committed) loses one
  partition's offset; a group with a member subscribed to one topic keeps that topic's offsets
  (GROUP_SUBSCRIBED_TO_TOPIC) and loses the other's; a group never seen and a topic that does not exist are refused.
- kafka-leader-election.sh (ElectLeaders) on one broker: preferred and unclean elections that are not needed, an
  election of every partition, an unknown topic and an unknown partition. Elections that move a leader need
  several brokers; `tests/cluster/protocol/handlers/test_elect_leaders.py` runs them on a two-node broker.

Each run of a tool starts a JVM (~2 s).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cluster.protocol.listener import start_listener
from tests.cluster.protocol.helpers import assigned_member
from tests.cluster.protocol.kafka_tools import CONSUMER_GROUPS, LEADER_ELECTION, run_kafka_tool

pytestmark = [pytest.mark.ray, pytest.mark.kafka]

DEADLINE_S = 30.0
QUIET = {"log_level": 0}
SUBSCRIBED, OTHER = "od-subscribed", "od-other"


@pytest.fixture(scope="module")
def raybroker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[str]:
    start_test_broker(num_partitions="2")
    with start_listener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": "2"}) as started:
        yield started.bootstrap_servers


def tool(bootstrap: str, *arguments: str) -> tuple[int, list[list[str]], list[str]]:
    """kafka-consumer-groups.sh against `bootstrap`: its exit code, the rows it printed, and its `Error:` lines."""
    ran = run_kafka_tool(CONSUMER_GROUPS, bootstrap, *arguments)
    rows = [line.split() for line in ran.stdout.splitlines() if line.strip() and not line.startswith("Error")]
    errors = [line for line in (ran.stdout + ran.stderr).splitlines() if line.startswith("Error")]
    return ran.returncode, rows, errors


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int], consumer: Any = None) -> None:
    """Commits `offsets` under `group`: through `consumer` (a member) if given, else as a consumer outside the
    group's membership (generation -1)."""
    from confluent_kafka import Consumer, TopicPartition

    committer = consumer or Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **QUIET}
    )
    try:
        committer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        if consumer is None:
            committer.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(timeout=DEADLINE_S).topic_partitions}


def offset_delete_answers(bootstrap: str) -> dict[str, Any]:
    """The scenario of the module docstring on one broker: each run's answer, then each group's offsets left."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(SUBSCRIBED, 2, 1), NewTopic(OTHER, 1, 1)]).values():
        future.result(timeout=DEADLINE_S)
    everything = {(SUBSCRIBED, 0): 3, (SUBSCRIBED, 1): 4, (OTHER, 0): 5}
    commit(bootstrap, "od-empty", everything)
    answers: dict[str, Any] = {
        "empty": tool(bootstrap, "--delete-offsets", "--group", "od-empty", "--topic", f"{SUBSCRIBED}:0"),
        "unknown group": tool(bootstrap, "--delete-offsets", "--group", "od-never-seen", "--topic", SUBSCRIBED),
        "unknown topic": tool(bootstrap, "--delete-offsets", "--group", "od-empty", "--topic", "od-missing"),
    }
    member = assigned_member(bootstrap, "od-active", SUBSCRIBED, DEADLINE_S)
    try:
        commit(bootstrap, "od-active", everything, member)
        answers["active"] = tool(
            bootstrap, "--delete-offsets", "--group", "od-active", "--topic", SUBSCRIBED, "--topic", OTHER
        )
    finally:
        member.close()
    answers["left"] = {group: committed(bootstrap, group) for group in ("od-empty", "od-active")}
    return answers


def test_kafka_consumer_groups_delete_offsets_agrees(kafka: str, raybroker: str) -> None:
    answers = {
        name: offset_delete_answers(bootstrap) for name, bootstrap in {"kafka": kafka, "raybroker": raybroker}.items()
    }
    oracle = answers["kafka"]
    assert oracle["empty"][0] == 0 and oracle["left"]["od-empty"] == {(SUBSCRIBED, 1): 4, (OTHER, 0): 5}
    assert oracle["left"]["od-active"] == {(SUBSCRIBED, 0): 3, (SUBSCRIBED, 1): 4}
    assert oracle["unknown group"][2] == ["Error: 'od-never-seen' does not exist."], oracle["unknown group"]
    for case in ("empty", "unknown group", "unknown topic", "active", "left"):
        assert answers["raybroker"][case] == oracle[case], (case, answers["raybroker"][case], oracle[case])


def leader_election_answers(bootstrap: str) -> dict[str, tuple[int, list[str]]]:
    """kafka-leader-election.sh's exit code and printed lines (stack traces aside) for each case of the module
    docstring, on a new two-partition topic."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic("elected", 2, 1)])["elected"].result(timeout=DEADLINE_S)
    cases = {
        "preferred": ["--election-type", "preferred", "--topic", "elected", "--partition", "0"],
        "unclean": ["--election-type", "unclean", "--topic", "elected", "--partition", "1"],
        "every partition": ["--election-type", "preferred", "--all-topic-partitions"],
        "unknown topic": ["--election-type", "preferred", "--topic", "never-made", "--partition", "0"],
        "unknown partition": ["--election-type", "preferred", "--topic", "elected", "--partition", "9"],
    }
    answers = {}
    for case, arguments in cases.items():
        ran = run_kafka_tool(LEADER_ELECTION, bootstrap, *arguments)
        said = [line for line in ran.stdout.splitlines() if line.strip()]
        answers[case] = (ran.returncode, said)
    return answers


def test_kafka_leader_election_agrees(kafka: str, raybroker: str) -> None:
    answers = {
        name: leader_election_answers(bootstrap) for name, bootstrap in {"kafka": kafka, "raybroker": raybroker}.items()
    }
    oracle = answers["kafka"]
    assert oracle["preferred"] == (0, ["Valid replica already elected for partitions elected-0"])
    assert oracle["unknown topic"][0] != 0
    for case, answer in oracle.items():
        assert answers["raybroker"][case] == answer, (case, answers["raybroker"][case], answer)
