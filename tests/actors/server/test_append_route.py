"""The append route on a real broker: appends awaited concurrently land in the order they were called, over the
same-node channel and as Ray calls, for acks 1 and -1, also when the earlier ones wait longest for their lookup and
for what they must await first (`admitted`); a partition whose actor went away is looked up again after the
retriable failure; an idempotent producer's later appends wait for the retry of the failed one. The oracle is the
list of batches appended, read back from the partition."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from storage.errors import (
    BrokerNotAvailableError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from storage.records.record_batch import RecordBatchBuilder, iter_batches
from tests.actors.support import now_ms
from tests.conftest import ONE_ACTOR_PER_PARTITION
from tests.storage.builders import simple_batch

pytestmark = pytest.mark.ray

APPENDS = 20
ROUNDS = 5
# The k-th append of a round awaits (APPENDS - k) * STEP_S before it may be sent: the first waits longest.
STEP_S = 0.002
# What an append to a leader whose process went away fails with (`actors.server.append_route`).
GONE = (BrokerNotAvailableError, RequestTimedOutError)


@pytest.fixture(scope="module")
def broker(start_test_broker: Any) -> Any:
    from actors import Admin

    # One actor per partition: a deleted partition's actor goes away with it, which the lookup test is about (a
    # partition host outlives its partitions, and a topic created again may open in the same one).
    broker, _ = start_test_broker(log_dirs_count=1, **ONE_ACTOR_PER_PARTITION)
    Admin(broker).create_topic("route", 1)
    return broker


def read_back(broker: Any, topic: str, start: int) -> list[bytes]:
    """Each record key of the partition from offset `start` to its log end offset (once replicated), in log
    order."""
    import ray

    handle = broker.partition(topic, 0)
    end = end_offset(broker, topic)
    deadline = time.monotonic() + 10
    while ray.get(handle.offsets.remote())[1] < end:  # reads stop at the high watermark, which follows acks=1
        assert time.monotonic() < deadline, "the high watermark did not reach the log end offset"
        time.sleep(0.01)
    keys: list[bytes] = []
    offset = start
    while offset < end:
        batches = list(iter_batches(ray.get(handle.read.remote(offset, 1 << 20))))
        keys.extend(record.key for batch in batches for record in batch.records())
        offset = batches[-1].next_offset
    return keys


def end_offset(broker: Any, topic: str) -> int:
    import ray

    return int(ray.get(broker.partition(topic, 0).offsets.remote())[2])


def recent_batch(tag: int) -> bytes:
    """One record `k<tag>-0`, stamped now, as every record of this module: the test broker checks retention every
    500 ms, and a record older than `retention.ms` (7 days) would take its segment, and the records read back,
    with it."""
    return simple_batch(1, tag=tag, timestamp=now_ms())


def idempotent_batch(sequence: int) -> bytes:
    builder = RecordBatchBuilder(producer_id=4_242, producer_epoch=0, base_sequence=sequence)
    builder.append(f"seq-{sequence}".encode(), b"v", timestamp=now_ms())
    return builder.build()


@pytest.mark.parametrize("acks", [1, -1])
@pytest.mark.parametrize("same_node_channels", [True, False], ids=["channel", "ray-call"])
def test_concurrent_appends_of_one_partition_land_in_call_order(
    broker: Any, acks: int, same_node_channels: bool
) -> None:
    from actors.server.append_route import AppendRoute

    start = end_offset(broker, "route")
    tags = [round_ * APPENDS + index for round_ in range(ROUNDS) for index in range(APPENDS)]

    async def append_all() -> list[int]:
        route = AppendRoute(same_node_channels)  # a new route: the first append of the round looks its leader up
        try:
            first_offsets = []
            for round_ in range(ROUNDS):
                appended = [
                    route.append(
                        "route",
                        0,
                        simple_batch(2, tag=round_ * APPENDS + index, timestamp=now_ms()),
                        acks,
                        admitted=asyncio.sleep((APPENDS - index) * STEP_S),
                    )
                    for index in range(APPENDS)
                ]
                first_offsets.extend(info.first_offset for info in await asyncio.gather(*appended))
            return first_offsets
        finally:
            route.close()

    first_offsets = asyncio.run(append_all())
    assert first_offsets == list(range(start, start + 2 * len(tags), 2))
    assert read_back(broker, "route", start) == [f"k{tag}-{i}".encode() for tag in tags for i in range(2)]


def test_a_partition_whose_actor_went_away_is_looked_up_again(broker: Any) -> None:
    from actors import Admin
    from actors.server.append_route import AppendRoute

    admin = Admin(broker)
    admin.create_topic("recreated", 1)
    route = AppendRoute()
    try:
        leader = route.leader("recreated", 0)
        assert route.send(leader, "recreated", 0, recent_batch(tag=1), 1).result().first_offset == 0
        admin.delete_topic("recreated")
        admin.create_topic("recreated", 1)
        # Refused unsent if the channel already knew its process gone, else sent and never answered (possibly
        # written, as Kafka's REQUEST_TIMED_OUT says): retriable either way.
        with pytest.raises(GONE) as failed:
            route.send(leader, "recreated", 0, recent_batch(tag=2), 1).result()
        assert failed.value.retriable
        fresh = route.leader("recreated", 0)
        assert fresh is not leader
        assert route.send(fresh, "recreated", 0, recent_batch(tag=3), 1).result().first_offset == 0
    finally:
        route.close()
    assert read_back(broker, "recreated", 0) == [b"k3-0"]


@pytest.mark.parametrize("retry_finds_no_leader", [False, True], ids=["retry-sent", "retry-lookup-fails"])
def test_an_idempotent_producers_appends_wait_for_the_retry_of_a_failed_one(
    broker: Any, retry_finds_no_leader: bool
) -> None:
    """The route's leader goes away between two appends of a pipeline: the first fails (retriable), and the second,
    sent after the failure, must not reach the new leader before the first's retry. A new log takes a producer it
    does not know from any sequence, so without the fence sequence 2 would be written first and the retry of 1
    refused as out of order (what the listener's clients saw in a failover).

    `retry_finds_no_leader`: the retry itself first finds no leader (the partition is gone a while, as between a
    leader's loss and the election of the next); the appends behind it stay fenced, or the next one would reach the
    new leader ahead of the retry and make librdkafka write its unacknowledged messages again in a new epoch (what
    a listener's client saw when its partition's leader node was removed)."""
    from actors import Admin
    from actors.server.append_route import AppendRoute
    from storage.errors import UnknownTopicOrPartitionError

    topic = "refenced" if retry_finds_no_leader else "fenced"
    admin = Admin(broker)
    admin.create_topic(topic, 1)
    route = AppendRoute()

    def append(sequence: int) -> int:
        return asyncio.run(route.append(topic, 0, idempotent_batch(sequence), 1)).first_offset

    try:
        assert append(0) == 0
        admin.delete_topic(topic)
        admin.create_topic(topic, 1)
        with pytest.raises(GONE):
            append(1)
        if retry_finds_no_leader:
            admin.delete_topic(topic)
            with pytest.raises((BrokerNotAvailableError, UnknownTopicOrPartitionError)) as lookup:
                append(1)
            assert lookup.value.retriable
            admin.create_topic(topic, 1)
        with pytest.raises(NotLeaderOrFollowerError):
            append(2)
        assert end_offset(broker, topic) == 0, "the fenced append was not sent"
        assert append(1) == 0
        assert append(2) == 1
    finally:
        route.close()
    assert read_back(broker, topic, 0) == [b"seq-1", b"seq-2"]


def test_an_append_that_finds_the_leader_looked_up_again_waits_for_its_producers_failed_one(broker: Any) -> None:
    """The route forgets a leader as a failed append's answer arrives, before that append's caller sets the fence:
    an append of the same producer that comes in between and looks the leader up again must still be fenced, not
    sent ahead of the failed one's retry (what librdkafka saw through a listener: retries answered
    NOT_LEADER_OR_FOLLOWER by the old leader and OUT_OF_ORDER_SEQUENCE_NUMBER by the new, then a new producer
    epoch). The later append is let through once the route has forgotten the leader."""
    from actors import Admin
    from actors.server.append_route import AppendRoute

    topic = "relooked"
    admin = Admin(broker)
    admin.create_topic(topic, 1)
    route = AppendRoute(same_node_channels=False)

    async def pipeline() -> list[Any]:
        async def leader_forgotten() -> None:
            while route.kept(topic, 0) is not None:
                await asyncio.sleep(0.001)

        earlier = route.append(topic, 0, idempotent_batch(1), 1)
        later = route.append(topic, 0, idempotent_batch(2), 1, admitted=leader_forgotten())
        return await asyncio.gather(earlier, later, return_exceptions=True)

    try:
        assert asyncio.run(route.append(topic, 0, idempotent_batch(0), 1)).first_offset == 0
        admin.delete_topic(topic)
        admin.create_topic(topic, 1)
        earlier_error, later_error = asyncio.run(pipeline())
        assert isinstance(earlier_error, GONE), earlier_error
        assert isinstance(later_error, NotLeaderOrFollowerError), later_error
        assert end_offset(broker, topic) == 0, "the later append was not sent"
        assert asyncio.run(route.append(topic, 0, idempotent_batch(1), 1)).first_offset == 0
        assert asyncio.run(route.append(topic, 0, idempotent_batch(2), 1)).first_offset == 1
    finally:
        route.close()
    assert read_back(broker, topic, 0) == [b"seq-1", b"seq-2"]


def test_appends_to_many_new_partitions_share_one_lookup(broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A route meeting every partition of a topic at once (a Produce request naming them all) looks their leaders
    up together: the appends of one event-loop pass make one bulk lookup, each lands at offset 0 of its own
    partition, and a partition the cluster does not have fails alone with its own error."""
    from actors import Admin
    from actors.server.append_route import AppendRoute

    partitions = 6
    Admin(broker).create_topic("route-many", partitions)
    looked_up: list[list[tuple[str, int]]] = []
    look_up = AppendRoute.look_up

    def recorded(route: AppendRoute, keys: list[tuple[str, int]]) -> Any:
        looked_up.append(sorted(keys))
        return look_up(route, keys)

    monkeypatch.setattr(AppendRoute, "look_up", recorded)

    async def append_all() -> list[Any]:
        route = AppendRoute()
        try:
            appended = [route.append("route-many", p, recent_batch(tag=p), 1) for p in range(partitions + 1)]
            return list(await asyncio.gather(*appended, return_exceptions=True))
        finally:
            route.close()

    answers = asyncio.run(append_all())
    assert looked_up == [[("route-many", p) for p in range(partitions + 1)]]
    assert [answer.first_offset for answer in answers[:partitions]] == [0] * partitions
    assert isinstance(answers[partitions], UnknownTopicOrPartitionError)
    for p in range(partitions):
        batches = list(iter_batches(broker.partition("route-many", p).read.remote(0, 1 << 20).future().result()))
        assert [record.key for batch in batches for record in batch.records()] == [f"k{p}-0".encode()]
