"""The consumer facade on a real broker: every record once, in per-partition order, across polls; positions
(committed, reset policies, seek, out of range after delete_records); offsets_for_times; deserializers;
committed offsets; subscriptions that grow; long-poll fetches (a record produced during a poll comes back
at once, the fetches of partitions without data stay in flight across polls); typed errors. The oracle is what
the module fixture sent."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from actors.clients import serializers
from storage.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidGroupIdError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from storage.records.record_batch import TimestampType
from tests.conftest import ONE_ACTOR_PER_PARTITION

pytestmark = pytest.mark.ray

# Recent on purpose: the test broker checks retention every 500 ms, and records older than `retention.ms`
# (7 days) would be deleted under the tests' feet. The 500 records span 500 s before now.
BASE_TIMESTAMP_MS = time.time_ns() // 1_000_000 - 600_000
SENT_COUNT = 500


@dataclass(frozen=True)
class Sent:
    partition: int
    offset: int
    timestamp: int
    key: bytes
    value: dict[str, int]


@pytest.fixture(scope="module")
def sent(start_test_broker: Any) -> list[Sent]:
    """Topic `c2` (2 partitions, written once, only read by the tests) and the oracle of what it holds."""
    from actors import Admin, Producer

    broker, _ = start_test_broker(log_dirs_count=1, **ONE_ACTOR_PER_PARTITION)
    admin = Admin(broker)
    admin.create_topic("c2", 2)
    admin.create_topic("c1", 1)
    admin.create_topic("grow", 1)
    oracle = []
    with Producer(broker, batch_size=2000) as producer:
        futures = [
            (i, producer.send("c2", {"i": i}, key=f"k{i % 10}", timestamp_ms=BASE_TIMESTAMP_MS + 1000 * i))
            for i in range(SENT_COUNT)
        ]
        for i, future in futures:
            metadata = future.result()
            oracle.append(
                Sent(metadata.partition, metadata.offset, metadata.timestamp, f"k{i % 10}".encode(), {"i": i})
            )
    return oracle


def by_partition(items: list[Any]) -> dict[int, list[tuple[int, Any]]]:
    grouped: dict[int, list[tuple[int, Any]]] = {}
    for item in items:
        grouped.setdefault(item.partition, []).append((item.offset, item.value))
    return grouped


def poll_until(consumer: Any, count: int, timeout_s: float = 20, **poll: Any) -> list[Any]:
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records.extend(consumer.poll(timeout_ms=200, **poll))
    return records


def produce(topic: str, values: list[bytes]) -> list[int]:
    from actors import Producer

    with Producer(linger_ms=0) as producer:
        futures = [producer.send(topic, value) for value in values]
    return [future.result().offset for future in futures]


def test_a_subscription_returns_every_record_once_in_partition_order_within_max_records(sent: list[Sent]) -> None:
    from actors import Consumer

    with Consumer(auto_offset_reset="earliest", value_deserializer=serializers.msgpack_deserializer) as consumer:
        consumer.subscribe(["c2"])
        assert consumer.assignment() == [("c2", 0), ("c2", 1)]
        records: list[Any] = []
        for _ in range(100):
            batch = consumer.poll(timeout_ms=200, max_records=70)
            assert len(batch) <= 70
            records.extend(batch)
            if len(records) >= SENT_COUNT:
                break
        assert consumer.poll(timeout_ms=100) == []
        assert by_partition(records) == by_partition(sent)
        assert [(r.key, r.timestamp) for r in sorted(records, key=lambda r: r.value["i"])] == [
            (s.key, s.timestamp) for s in sent
        ]
        assert {r.timestamp_type for r in records} == {TimestampType.CREATE_TIME}
        for partition, items in by_partition(sent).items():
            assert consumer.position(("c2", partition)) == items[-1][0] + 1


@pytest.mark.parametrize("local_fetch", [True, False])
def test_records_are_the_same_read_from_the_page_cache_or_through_the_actor(
    sent: list[Sent], local_fetch: bool
) -> None:
    """The partitions live on this node: by default the consumer reads their files itself
    (`actors.clients.local_fetch`),
    with `local_fetch=False` through the actors; either way every record comes back once, in order."""
    from actors import Consumer
    from actors.clients import local_fetch as local_fetch_module

    before = local_fetch_module.statistics()
    with Consumer(
        auto_offset_reset="earliest", local_fetch=local_fetch, value_deserializer=serializers.msgpack_deserializer
    ) as consumer:
        consumer.subscribe(["c2"])
        records = poll_until(consumer, SENT_COUNT)
    after = local_fetch_module.statistics()
    assert by_partition(records) == by_partition(sent)
    if local_fetch:
        assert after.local_reads > before.local_reads and after.actor_fetches == before.actor_fetches
    else:
        assert after.actor_fetches > before.actor_fetches and after.local_reads == before.local_reads
    assert after.fallbacks == before.fallbacks


def test_seek_starts_mid_batch_and_seek_to_beginning_and_end_move_the_position(sent: list[Sent]) -> None:
    from actors import Consumer

    partition_zero = by_partition(sent)[0]
    with Consumer(max_poll_records=3, value_deserializer=serializers.msgpack_deserializer) as consumer:
        consumer.assign([("c2", 0)])
        consumer.seek(("c2", 0), 11)
        assert [(r.offset, r.value) for r in consumer.poll(timeout_ms=5000)] == partition_zero[11:14]
        assert consumer.position(("c2", 0)) == 14
        consumer.seek_to_end()
        assert consumer.position(("c2", 0)) == len(partition_zero)
        assert consumer.poll(timeout_ms=100) == []
        consumer.seek_to_beginning([("c2", 0)])
        assert [(r.offset, r.value) for r in consumer.poll(timeout_ms=5000)] == partition_zero[:3]


def test_offsets_for_times_finds_the_first_record_at_or_after_each_timestamp(sent: list[Sent]) -> None:
    from actors import Consumer

    wanted = {("c2", 0): BASE_TIMESTAMP_MS + 123_500, ("c2", 1): BASE_TIMESTAMP_MS}

    def oracle(partition: int, timestamp: int) -> tuple[int, int] | None:
        found = [(s.offset, s.timestamp) for s in sent if s.partition == partition and s.timestamp >= timestamp]
        return min(found) if found else None

    with Consumer() as consumer:
        assert consumer.offsets_for_times(wanted) == {tp: oracle(tp[1], ts) for tp, ts in wanted.items()}
        assert consumer.offsets_for_times({("c2", 0): BASE_TIMESTAMP_MS + 10**7}) == {("c2", 0): None}
        with pytest.raises(InvalidRequestError):
            consumer.offsets_for_times({("c2", 0): -1})


def test_latest_starts_at_the_end_and_sees_only_new_records(sent: list[Sent]) -> None:
    from actors import Consumer

    produce("c1", [b"old-1", b"old-2"])
    with Consumer(auto_offset_reset="latest") as consumer:
        consumer.assign([("c1", 0)])
        assert consumer.poll(timeout_ms=100) == []
        offsets = produce("c1", [b"new-1", b"new-2"])
        records = poll_until(consumer, 2)
        assert [(r.offset, r.value) for r in records] == list(zip(offsets, [b"new-1", b"new-2"], strict=True))


def test_the_published_high_watermark_is_read_once_the_tail_is_followed_and_is_the_end_every_ack_reached(
    sent: list[Sent],
) -> None:
    """`Consumer.published_high_watermark`: None before the consumer follows the partition's tail on its node, then
    the leader's high watermark without a call, which already counts every append acknowledged before it is read
    (the oracle: the offsets the producer's acknowledgements gave)."""
    from actors import Admin, Consumer

    Admin().create_topic("published-hw", 1)
    tp = ("published-hw", 0)
    with Consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert consumer.published_high_watermark(tp) is None
        offsets = produce("published-hw", [b"a", b"b"])
        assert [r.offset for r in poll_until(consumer, 2)] == offsets
        deadline = time.monotonic() + 20
        while consumer.published_high_watermark(tp) is None and time.monotonic() < deadline:
            consumer.poll(timeout_ms=50)
        assert consumer.published_high_watermark(tp) == offsets[-1] + 1
        for value in (b"c", b"d", b"e"):
            (offset,) = produce("published-hw", [value])
            assert consumer.published_high_watermark(tp) == offset + 1


def test_a_position_below_the_log_start_is_reset_by_the_policy(sent: list[Sent]) -> None:
    from actors import Admin, Consumer

    offsets = produce("c1", [f"r{i}".encode() for i in range(6)])
    log_start = Admin().delete_records("c1", 0, offsets[3])
    assert log_start == offsets[3]
    with Consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([("c1", 0)])
        consumer.seek(("c1", 0), offsets[0])
        assert [r.value for r in poll_until(consumer, 3)][:3] == [b"r3", b"r4", b"r5"]
    with Consumer(auto_offset_reset="latest") as consumer:
        consumer.assign([("c1", 0)])
        consumer.seek(("c1", 0), offsets[0])
        assert consumer.poll(timeout_ms=100) == []
        assert consumer.position(("c1", 0)) == offsets[-1] + 1
    with Consumer(auto_offset_reset="none") as consumer:
        consumer.assign([("c1", 0)])
        with pytest.raises(OffsetOutOfRangeError):
            consumer.position(("c1", 0))
        consumer.seek(("c1", 0), offsets[0])
        with pytest.raises(OffsetOutOfRangeError):
            consumer.poll(timeout_ms=100)


def test_a_group_starts_at_its_committed_offsets_and_auto_commit_commits_on_close(sent: list[Sent]) -> None:
    from actors import Consumer

    partition_zero = by_partition(sent)[0]
    with Consumer(group_id="readers", auto_offset_reset="earliest") as consumer:
        consumer.assign([("c2", 0), ("c2", 1)])
        assert consumer.committed(("c2", 0)) is None
        consumer.commit({("c2", 0): 7})
        assert consumer.committed(("c2", 0)) == 7
    with Consumer(
        group_id="readers",
        auto_offset_reset="earliest",
        enable_auto_commit=True,
        max_poll_records=5,
        value_deserializer=serializers.msgpack_deserializer,
    ) as consumer:
        consumer.assign([("c2", 0)])
        assert [(r.offset, r.value) for r in consumer.poll(timeout_ms=5000)] == partition_zero[7:12]
    with Consumer(group_id="readers") as consumer:
        assert consumer.committed(("c2", 0)) == 12
        assert consumer.committed(("c2", 1)) is None


def _coordinator_restarting() -> None:
    raise BrokerNotAvailableError("the group coordinator is restarting")


class RestartingCoordinator:
    """The group coordinator's handle, whose first `failures` commits fail with a retriable error (a Ray task that
    raises it), as while it restarts; any other method is the handle's own."""

    def __init__(self, handle: Any, failures: int) -> None:
        import ray

        self._handle = handle
        self._fail = ray.remote(num_cpus=0)(_coordinator_restarting)
        self.failures = failures
        self.failed = 0
        self.commit = self

    def remote(self, group: str, offsets: dict[tuple[str, int], int]) -> Any:
        if self.failed < self.failures:
            self.failed += 1
            return self._fail.remote()
        return self._handle.commit.remote(group, offsets)

    def __getattr__(self, method: str) -> Any:
        return getattr(self._handle, method)


def test_a_commit_is_retried_through_retriable_failures_until_default_api_timeout_ms(
    sent: list[Sent], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's commitSync: a retriable failure (the coordinator restarting) is tried again; past
    `default_api_timeout_ms` the failure is raised."""
    from actors import Consumer
    from actors.calls import get_actor
    from actors.options import group_coordinator_name

    handle = get_actor(group_coordinator_name())
    restarting = RestartingCoordinator(handle, failures=2)
    monkeypatch.setattr(Consumer, "_coordinator", lambda _: restarting)
    with Consumer(group_id="retried", retry_backoff_ms=10) as consumer:
        consumer.commit({("c2", 0): 3})
        assert restarting.failed == 2
        assert consumer.committed(("c2", 0)) == 3
    restarting = RestartingCoordinator(handle, failures=1_000_000)
    with Consumer(group_id="retried", retry_backoff_ms=10, default_api_timeout_ms=300) as consumer:
        started = time.monotonic()
        with pytest.raises(BrokerNotAvailableError):
            consumer.commit({("c2", 0): 4})
        assert 0.2 <= time.monotonic() - started < 10 and restarting.failed > 1
        assert consumer.committed(("c2", 0)) == 3


def test_deserializers_apply_to_keys_and_values_and_bad_bytes_raise_with_the_offset(sent: list[Sent]) -> None:
    from actors import Consumer

    with Consumer(
        auto_offset_reset="earliest",
        key_deserializer=serializers.string_deserializer,
        value_deserializer=serializers.msgpack_deserializer,
    ) as consumer:
        consumer.assign([("c2", 1)])
        record = consumer.poll(timeout_ms=5000, max_records=1)[0]
        first = next(s for s in sent if s.partition == 1)
        assert (record.key, record.value) == (first.key.decode(), first.value)
    with Consumer(auto_offset_reset="earliest", value_deserializer=serializers.json_deserializer) as consumer:
        consumer.assign([("c2", 1)])
        with pytest.raises(SerializationError) as caught:
            consumer.poll(timeout_ms=5000)
        assert caught.value.offset == first.offset


def test_a_subscription_picks_up_partitions_added_to_its_topic(sent: list[Sent]) -> None:
    from actors import Admin, Consumer

    with Consumer(auto_offset_reset="earliest", metadata_max_age_ms=0) as consumer:
        consumer.subscribe(["grow"])
        assert consumer.poll(timeout_ms=0) == []
        Admin().add_partitions("grow", 2)
        consumer.poll(timeout_ms=0)
        assert consumer.assignment() == [("grow", 0), ("grow", 1)]


def test_polling_carries_on_after_a_partition_actor_restarts(sent: list[Sent]) -> None:
    import ray

    from actors import Broker, Consumer

    with Consumer(auto_offset_reset="latest") as consumer:
        consumer.assign([("c1", 0)])
        consumer.position(("c1", 0))
        ray.kill(Broker.connect().partition("c1", 0), no_restart=False)
        assert consumer.poll(timeout_ms=300) == []
        offsets = produce("c1", [b"after-restart"])
        assert [(r.offset, r.value) for r in poll_until(consumer, 1)] == [(offsets[0], b"after-restart")]


def produce_later(topic: str, partition: int, value: bytes, delay_s: float) -> threading.Thread:
    """Sends `value` to the partition `delay_s` from now, in a started thread."""
    from actors import Producer

    def send() -> None:
        time.sleep(delay_s)
        with Producer(linger_ms=0) as producer:
            producer.send(topic, value, partition=partition).result()

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def test_a_record_produced_during_a_poll_comes_back_at_once_and_an_empty_poll_lasts_its_timeout(
    sent: list[Sent],
) -> None:
    from actors import Admin, Consumer, Producer

    Admin().create_topic("long-poll", 1)
    with Producer() as producer:
        producer.send("long-poll", b"warm-up", partition=0).result()  # the producer's first call starts actors
    with Consumer(auto_offset_reset="latest", fetch_max_wait_ms=30_000) as consumer:
        consumer.assign([("long-poll", 0)])
        started = time.monotonic()
        assert consumer.poll(timeout_ms=400) == []
        assert 0.39 < time.monotonic() - started < 5
        producing = produce_later("long-poll", 0, b"during", 1.0)
        started = time.monotonic()
        records = consumer.poll(timeout_ms=60_000)
        elapsed = time.monotonic() - started
        producing.join()
        assert [(r.offset, r.value) for r in records] == [(1, b"during")]
        # The producer starts a Ray actor call 1 s in; the fetch was held by the partition actor meanwhile.
        assert 0.9 < elapsed < 20


def test_polls_return_any_partition_with_data_and_keep_the_others_fetches_in_flight(sent: list[Sent]) -> None:
    from actors import Admin, Consumer

    Admin().create_topic("long-poll-2", 2)
    with Consumer(auto_offset_reset="latest", local_fetch=False) as consumer:
        consumer.assign([("long-poll-2", 0), ("long-poll-2", 1)])
        assert consumer.poll(timeout_ms=200) == []
        got = []
        for step in range(6):
            partition = step % 2
            producing = produce_later("long-poll-2", partition, f"v{step}".encode(), 0.3)
            records = consumer.poll(timeout_ms=60_000)
            producing.join()
            got.extend((r.partition, r.offset, r.value) for r in records)
        got.extend((r.partition, r.offset, r.value) for r in poll_until(consumer, 1, timeout_s=1))
        assert sorted(got) == [(0, 0, b"v0"), (0, 1, b"v2"), (0, 2, b"v4"), (1, 0, b"v1"), (1, 1, b"v3"), (1, 2, b"v5")]
        assert consumer.position(("long-poll-2", 0)) == 3 and consumer.position(("long-poll-2", 1)) == 3


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"auto_offset_reset": "smallest"}, InvalidConfigError),
        ({"max_poll_records": 0}, InvalidConfigError),
        ({"fetch_max_wait_ms": -1}, InvalidConfigError),
        ({"fetch_min_bytes": -1}, InvalidConfigError),
        ({"group_id": ""}, InvalidGroupIdError),
        ({"enable_auto_commit": True}, InvalidGroupIdError),
    ],
)
def test_bad_consumer_configs_raise_typed_errors(sent: list[Sent], options: dict[str, Any], error: type) -> None:
    from actors import Consumer

    with pytest.raises(error):
        Consumer(**options)


def test_bad_assignments_and_calls_raise_typed_errors(sent: list[Sent]) -> None:
    from actors import Consumer

    consumer = Consumer()
    with pytest.raises(UnknownTopicOrPartitionError):
        consumer.assign([("no-such-topic", 0)])
    with pytest.raises(UnknownTopicOrPartitionError):
        consumer.assign([("c2", 2)])
    with pytest.raises(UnknownTopicOrPartitionError):
        consumer.assign([("c2", "0")])
    with pytest.raises(UnknownTopicOrPartitionError):
        consumer.subscribe(["no-such-topic"])
    consumer.assign([("c2", 0)])
    with pytest.raises(InvalidRequestError):
        consumer.position(("c2", 1))
    with pytest.raises(InvalidRequestError):
        consumer.seek(("c2", 0), -1)
    with pytest.raises(InvalidRequestError):
        consumer.poll(max_records=0)
    with pytest.raises(InvalidGroupIdError):
        consumer.commit()
    with pytest.raises(InvalidGroupIdError):
        consumer.committed(("c2", 0))
    consumer.close()
    with pytest.raises(InvalidRequestError):
        consumer.poll()
