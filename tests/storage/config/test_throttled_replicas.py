"""The throttled-replicas topic configs (`storage.config.throttled_replicas`): what Kafka's
`ThrottledReplicaListValidator` accepts, and the partitions each broker is throttled on."""

from __future__ import annotations

import pytest

from storage.config.log_config import LogConfig
from storage.config.throttled_replicas import ThrottledReplicas
from storage.errors import InvalidConfigError

NAME = "leader.replication.throttled.replicas"


@pytest.mark.parametrize(
    ("value", "everything", "pairs"),
    [
        ("", False, set()),
        ("*", True, set()),
        (" * ", True, set()),
        ("0:1", False, {(0, 1)}),
        ("0:1, 0:2 ,1:1", False, {(0, 1), (0, 2), (1, 1)}),
    ],
)
def test_values_kafka_accepts(value: str, everything: bool, pairs: set[tuple[int, int]]) -> None:
    parsed = ThrottledReplicas.parse(NAME, value)
    assert (parsed.everything, set(parsed.pairs)) == (everything, pairs)


@pytest.mark.parametrize("value", ["0", "0:", ":1", "a:1", "0:1,", "*,0:1", "0:1:2", "-1:1", "0;1"])
def test_values_kafka_refuses(value: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"must be the literal '\*' or a list of replicas"):
        ThrottledReplicas.parse(NAME, value)
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties({NAME: value})


def test_partitions_of_a_broker() -> None:
    listed = ThrottledReplicas.parse(NAME, "0:1,1:2,2:1")
    assert listed.partitions_of(1) == {0, 2}
    assert listed.partitions_of(3) == frozenset()
    assert ThrottledReplicas.parse(NAME, "*").partitions_of(3) is None


def test_a_topic_config_reads_both_sides() -> None:
    config = LogConfig.from_properties(
        {"leader.replication.throttled.replicas": "0:1", "follower.replication.throttled.replicas": "*"}
    )
    assert config.throttled_replicas("leader").pairs == {(0, 1)}
    assert config.throttled_replicas("follower").everything
