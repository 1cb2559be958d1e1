"""Python consumers as members of a group of Kafka 4's consumer protocol (`group_protocol="consumer"`), on a real
broker through the group coordinator actor: two members split a topic, a third joins and a member leaves, the
partitions moving each time without stopping the others; with automatic commits (at every revocation, as Kafka's
consumer commits before giving a partition up) every record produced is read exactly once across the members. A
member the group no longer knows cannot commit (`CommitFailedError`), and joins again. The oracle is what the test
produced, by (partition, offset)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from storage.errors import CommitFailedError, InvalidConfigError, InvalidGroupIdError

pytestmark = pytest.mark.ray

PARTITIONS = 4
DEADLINE_S = 60.0
TOPIC = "members"


@pytest.fixture(scope="module")
def broker(start_test_broker: Any) -> Any:
    """A broker whose consumer-protocol members heartbeat every second (Kafka's default is 5 s)."""
    from actors import Admin

    running, _ = start_test_broker(
        log_dirs_count=1,
        group_consumer_heartbeat_interval_ms="1000",
        group_consumer_min_heartbeat_interval_ms="1000",
    )
    Admin(running).create_topic(TOPIC, PARTITIONS)
    return running


def produce(broker: Any, count: int, start: int) -> set[tuple[int, int]]:
    from actors import Producer

    with Producer(broker) as producer:
        futures = [producer.send(TOPIC, {"i": i}, key=f"k{i}") for i in range(start, start + count)]
        producer.flush()
    return {(metadata.partition, metadata.offset) for metadata in (future.result() for future in futures)}


def member(broker: Any, group: str) -> Any:
    from actors import Consumer

    consumer = Consumer(
        broker, group_id=group, group_protocol="consumer", auto_offset_reset="earliest", enable_auto_commit=True
    )
    consumer.subscribe([TOPIC])
    return consumer


def poll_until(members: list[Any], read: Counter[tuple[int, int]], what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S} s"
        for consumer in members:
            read.update((record.partition, record.offset) for record in consumer.poll(timeout_ms=50))


def sizes(members: list[Any]) -> list[int]:
    return sorted(len(consumer.assignment()) for consumer in members)


def test_members_share_the_partitions_and_read_every_record_once(broker: Any) -> None:
    group = "python-members"
    produced = produce(broker, 200, 0)
    read: Counter[tuple[int, int]] = Counter()
    members = [member(broker, group), member(broker, group)]
    try:
        poll_until(members, read, "a 2/2 split", lambda: sizes(members) == [2, 2] and set(read) >= produced)
        members.append(member(broker, group))
        produced |= produce(broker, 200, 200)
        poll_until(members, read, "a 1/1/2 split", lambda: sizes(members) == [1, 1, 2] and set(read) >= produced)
        owned = [set(consumer.assignment()) for consumer in members]
        assert set().union(*owned) == {(TOPIC, p) for p in range(PARTITIONS)} and sum(map(len, owned)) == PARTITIONS
        members.pop(0).close()
        produced |= produce(broker, 200, 400)
        poll_until(
            members, read, "a 2/2 split after a leave", lambda: sizes(members) == [2, 2] and set(read) >= produced
        )
    finally:
        for consumer in members:
            consumer.close()
    assert set(read) == produced
    assert max(read.values()) == 1, [position for position, count in read.items() if count > 1][:10]


def test_a_member_the_group_forgot_cannot_commit_and_joins_again(broker: Any) -> None:
    from actors.calls import call, get_actor
    from actors.core.groups.consumer_group_api import HeartbeatRequest
    from actors.options import group_coordinator_name

    group = "forgotten-member"
    produce(broker, 20, 0)
    consumer = member(broker, group)
    try:
        read: Counter[tuple[int, int]] = Counter()
        poll_until([consumer], read, "all four partitions", lambda: len(consumer.assignment()) == PARTITIONS)
        coordinator = get_actor(group_coordinator_name())
        forgotten = consumer.consumer_group_metadata()
        member_id = forgotten.member_id
        call(coordinator.consumer_group_heartbeat.remote(HeartbeatRequest(group, member_id, -1)))
        with pytest.raises(CommitFailedError, match="UNKNOWN_MEMBER_ID"):
            consumer.commit()
        # Its next heartbeat is answered UNKNOWN_MEMBER_ID: it joins again and gets the partitions back.
        poll_until(
            [consumer],
            read,
            "joined again",
            lambda: (
                consumer.consumer_group_metadata().generation_id > forgotten.generation_id
                and len(consumer.assignment()) == PARTITIONS
            ),
        )
        consumer.commit()
    finally:
        consumer.close()


def test_the_group_protocol_is_checked(broker: Any) -> None:
    from actors import Consumer

    with pytest.raises(InvalidConfigError, match="group_protocol must be one of classic, consumer"):
        Consumer(broker, group_id="g", group_protocol="share")
    with pytest.raises(InvalidGroupIdError, match="needs a group_id"):
        Consumer(broker, group_protocol="consumer")
