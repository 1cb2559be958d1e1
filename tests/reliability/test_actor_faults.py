"""Actor faults under load: producers and a consumer group run while the harness SIGKILLs partition actors,
the log-manager actor (alone and together with a partition actor) and the group coordinator; Ray restarts
each of them.

The oracle and what "exactly once" means here:

- Producers: each of two idempotent producers sends records with unique values to every partition (the
  partition chosen by the send index) and records, from its futures, the offset each record was acknowledged
  at. Producers retry retriable errors themselves; no record may fail for good.
- Log: afterwards each partition's log holds every acknowledged record exactly once at its acknowledged
  offset, nothing that was not acknowledged, offsets contiguous from 0, and each producer's records in the
  order it sent them.
- Consumer group: one consumer at a time reads every partition, commits after each poll the offset after
  the last record it processed, and "crashes" at random moments (thrown away between a poll and its commit,
  so those records come again). A session starts where the group's committed offsets say. Counting, for
  every session, only the records below the offsets that session committed, every record of every
  partition is delivered exactly once, in offset order, with the value the log holds; the records delivered
  again after a crash are exactly those the crashed session had not committed.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

import actors.channels.append_connection
import actors.server.append_route
from actors import Admin, Broker, Consumer, Producer
from actors.calls import get_actor
from actors.options import group_coordinator_name, log_manager_name
from storage.errors import BrokerNotAvailableError, RequestTimedOutError
from storage.partition.producer_state import NUM_BATCHES_TO_RETAIN
from storage.records.record_batch import iter_batches
from tests.reliability.broker_support import (
    Acknowledgements,
    check_log_holds,
    produce_paced,
    read_partition,
    seeded_random,
    shared_broker,
    sigkill_and_wait,
    wait_for,
)
from tests.reliability.modes import scaled

pytestmark = [pytest.mark.reliability, pytest.mark.ray]

TOPIC = "faults"
GROUP = "faults-group"
PARTITIONS = scaled(4, 8)
PRODUCERS = 2
# Fault events, taken in turn: a partition actor, the log manager, both at once, the group coordinator.
FAULT_EVENTS = scaled(4, 24)
# Per producer; low enough that two producers and a consumer leave the CPU to the restarting actors.
RECORDS_PER_SECOND = 400
RETRIABLE = (BrokerNotAvailableError, RequestTimedOutError)


@dataclass
class Session:
    """One consumer's life: what it delivered, per partition, and the offsets it committed last."""

    delivered: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)


@pytest.fixture(scope="module")
def broker(start_test_broker: Any) -> Broker:
    return shared_broker(start_test_broker)


def commit_until_done(consumer: Consumer, offsets: dict[tuple[str, int], int]) -> int:
    """Commits, retrying while the coordinator or its partition restarts; returns the failed attempts."""
    failures = 0
    while True:
        try:
            consumer.commit(offsets)
            return failures
        except RETRIABLE:
            failures += 1
            time.sleep(0.1)


def consume(
    broker: Broker, sessions: list[Session], stop: threading.Event, rng: Any, errors: list[BaseException]
) -> None:
    """Consumer sessions one after another until `stop` and the end offsets are all committed."""
    failed_polls = failed_commits = 0
    try:
        while True:
            session = Session()
            sessions.append(session)
            crash_after = rng.uniform(0.5, 2.0)
            born = time.monotonic()
            consumer = Consumer(broker, group_id=GROUP, auto_offset_reset="earliest", max_poll_records=300)
            consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
            while True:
                try:
                    records = consumer.poll(timeout_ms=200)
                except RETRIABLE:
                    failed_polls += 1
                    time.sleep(0.1)
                    continue
                offsets: dict[tuple[str, int], int] = {}
                for record in records:
                    session.delivered.setdefault(record.partition, []).append((record.offset, record.value))
                    offsets[(TOPIC, record.partition)] = record.offset + 1
                if not stop.is_set() and time.monotonic() - born > crash_after:
                    break  # a crash between processing and committing: these records come again
                if offsets:
                    failed_commits += commit_until_done(consumer, offsets)
                    session.committed.update({p: offset for (_, p), offset in offsets.items()})
                if stop.is_set() and not records and caught_up(broker, committed_now(sessions)):
                    consumer.close()
                    print(f"actor faults: {failed_polls} polls and {failed_commits} commits failed and were retried")
                    return
    except BaseException as exc:
        errors.append(exc)


def committed_now(sessions: list[Session]) -> dict[int, int]:
    committed: dict[int, int] = {}
    for session in sessions:
        committed.update(session.committed)
    return committed


def caught_up(broker: Broker, committed: dict[int, int]) -> bool:
    import ray

    ends = ray.get([broker.partition(TOPIC, p).offsets.remote() for p in range(PARTITIONS)])
    return all(committed.get(p, 0) == end for p, (_, end, _) in enumerate(ends))


def check_consumed_exactly_once(sessions: list[Session], logs: dict[int, list[tuple[int, bytes | None]]]) -> int:
    """See the module docstring; returns how many records were delivered twice (redelivered after crashes)."""
    redelivered = 0
    for partition, log in logs.items():
        content = dict(log)
        position = 0  # the group's committed offset as the next session sees it
        kept: list[int] = []
        for number, session in enumerate(sessions):
            delivered = session.delivered.get(partition, [])
            offsets = [offset for offset, _ in delivered]
            assert offsets == list(range(position, position + len(offsets))), (
                f"partition {partition}, session {number}: delivered {offsets[:5]}... but the group had committed "
                f"{position}"
            )
            wrong = [(offset, value) for offset, value in delivered if content.get(offset) != value]
            assert not wrong, f"partition {partition}: delivered records that differ from the log: {wrong[:3]}"
            end = session.committed.get(partition, position)
            assert position <= end <= position + len(offsets)
            kept.extend(range(position, end))
            redelivered += position + len(offsets) - end
            position = end
        assert kept == [offset for offset, _ in log], f"partition {partition}: committed records != log"
    return redelivered


def test_actor_faults_under_load_lose_and_duplicate_nothing(broker: Broker) -> None:
    """Slow (~8 s): producers run through every injected fault and each fault's recovery before the logs are checked."""
    rng, _ = seeded_random("actor faults")
    Admin(broker).create_topic(TOPIC, PARTITIONS, {"segment.bytes": str(32 * 1024)})
    node_id = broker.node_of(TOPIC, 0)
    acks = [Acknowledgements() for _ in range(PRODUCERS)]
    producers = [
        Producer(broker, linger_ms=5, batch_size=2048, retries=1000, retry_backoff_max_ms=250) for _ in range(PRODUCERS)
    ]
    stop_producing = threading.Event()
    stop_consuming = threading.Event()
    sessions: list[Session] = []
    consumer_errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=produce_paced,
            args=(producer, TOPIC, PARTITIONS, f"p{n}", RECORDS_PER_SECOND, acks[n], stop_producing),
            name=f"producer-{n}",
        )
        for n, producer in enumerate(producers)
    ]
    threads.append(
        threading.Thread(target=consume, args=(broker, sessions, stop_consuming, rng, consumer_errors), name="group")
    )
    for thread in threads:
        thread.start()
    kills: dict[str, int] = {"partition": 0, "log-manager": 0, "group-coordinator": 0}
    try:
        for event in range(FAULT_EVENTS):
            time.sleep(rng.uniform(0.1, 0.5))
            kind = event % 4
            if kind in (0, 2):
                partition = rng.randrange(PARTITIONS)
                target = broker.partition(TOPIC, partition)
                with ThreadPoolExecutor(1) as pool:
                    if kind == 2:
                        # Both at once: the log manager comes back while the partition is still recovering.
                        manager_killed = pool.submit(sigkill_and_wait, get_actor(log_manager_name(node_id)))
                    sigkill_and_wait(target, ready="ready")
                    kills["partition"] += 1
                    if kind == 2:
                        manager_killed.result()
                        kills["log-manager"] += 1
            elif kind == 1:
                sigkill_and_wait(get_actor(log_manager_name(node_id)))
                kills["log-manager"] += 1
            else:
                sigkill_and_wait(get_actor(group_coordinator_name()), ready="ready")
                kills["group-coordinator"] += 1
            sent_before = sum(a.count() for a in acks)
            wait_for(lambda at=sent_before: sum(a.count() for a in acks) > at, 120, "producers to go on")
    finally:
        stop_producing.set()
        for thread in threads[:PRODUCERS]:
            thread.join(120)
        for producer in producers:
            producer.close(120)
        stop_consuming.set()
        threads[-1].join(180)
    assert not threads[-1].is_alive(), "the consumer group did not catch up within 3 minutes"
    assert not consumer_errors, f"the consumer failed: {consumer_errors[0]!r}"
    for n, ack in enumerate(acks):
        assert not ack.failures, f"producer {n}: {len(ack.failures)} records failed, first: {ack.failures[0]!r}"
    logs = {p: read_partition(broker.partition(TOPIC, p)) for p in range(PARTITIONS)}
    for partition, log in logs.items():
        acked: dict[int, bytes] = {}
        for ack in acks:
            acked.update(ack.snapshot().get(partition, {}))
        check_log_holds(log, acked)
        assert dict(log) == acked, f"partition {partition} holds records nobody got acknowledged"
        for n, ack in enumerate(acks):
            offsets = [offset for offset, _ in ack.in_send_order().get(partition, [])]
            assert offsets == sorted(offsets), f"producer {n}'s records are out of send order in {partition}"
    redelivered = check_consumed_exactly_once(sessions, logs)
    total = sum(len(log) for log in logs.values())
    assert total == sum(ack.sent for ack in acks)
    print(
        f"actor faults: kills {kills}, {total} records verified in the logs and through {len(sessions)} consumer "
        f"sessions ({redelivered} redelivered after crashes, all uncommitted): 0 lost, 0 duplicated"
    )


def _lose_answer(info: Any) -> Any:
    """Runs once the append it is given has been written: its answer is lost, as when the actor dies then."""
    raise BrokerNotAvailableError("the answer was lost after the append was written")


class LosingHandle:
    """A partition handle that forwards every append but loses the answer of every `lose_every`-th call, and
    records how many batches each call carried and how many were unanswered when it was sent; any other method is
    the handle's own."""

    def __init__(self, handle: Any, lose_every: int) -> None:
        import ray

        self._handle = handle
        self._lose_every = lose_every
        self._lose = ray.remote(num_cpus=0)(_lose_answer)
        self.calls: list[tuple[int, int]] = []  # (batches in the call, batches unanswered before it)
        self._outstanding: list[tuple[Any, int]] = []
        self.append = self

    def remote(self, payload: bytes, required_acks: int = 1) -> Any:
        import ray

        batches = len(list(iter_batches(payload)))
        refs = [ref for ref, _ in self._outstanding]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
        self._outstanding = [(ref, n) for ref, n in self._outstanding if ref not in ready]
        self.calls.append((batches, sum(n for _, n in self._outstanding)))
        ref = self._handle.append.remote(payload, required_acks)
        if len(self.calls) % self._lose_every == 0:
            ref = self._lose.remote(ref)
        self._outstanding.append((ref, batches))
        return ref

    def __getattr__(self, method: str) -> Any:
        """Every other partition method (`replication_state`, which the route's lookup asks) as the handle's."""
        return getattr(self._handle, method)


def test_lost_answers_are_deduplicated_because_at_most_five_batches_are_unacknowledged(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the producer packed every ready batch of a partition into one call, so after a backlog (an
    actor restart) dozens of batches were unacknowledged at once; when the answer of such a call was lost
    after the write, its retry fell outside the partition's 5-batch dedup window and failed with
    OutOfOrderSequenceError although the records were in the log."""
    topic = "lost-answers"
    Admin(broker).create_topic(topic, 1)
    losing = LosingHandle(broker.partition(topic, 0), lose_every=4)
    state = broker.topic(topic).state(0)
    monkeypatch.setattr(
        actors.server.append_route, "leader_replicas", lambda keys: dict.fromkeys(keys, (losing, state))
    )
    # Ray calls whose answers get lost, not the append channel (whose answers come or break the connection).
    monkeypatch.setattr(actors.channels.append_connection.AppendConnections, "for_address", lambda *_, **__: None)
    acks = Acknowledgements()
    # Tiny batches sent faster than the partition answers: a backlog of many ready batches builds up.
    with Producer(broker, linger_ms=0, batch_size=256, retry_backoff_ms=10, retries=50) as producer:
        for index in range(1500):
            value = f"lost-{index:05d}".encode()
            acks.track(producer.send(topic, value, partition=0), value)
        producer.flush()
    assert not acks.failures, f"{len(acks.failures)} records failed, first: {acks.failures[0]!r}"
    lost = len(losing.calls) // 4
    assert lost >= 5, "too few answers were lost to test anything"
    log = read_partition(broker.partition(topic, 0))
    acked = acks.snapshot()[0]
    check_log_holds(log, acked)
    assert dict(log) == acked
    worst = max(batches + unanswered for batches, unanswered in losing.calls)
    assert worst <= NUM_BATCHES_TO_RETAIN, f"{worst} batches were unacknowledged at once"
    print(f"lost answers: {lost} of {len(losing.calls)} answers lost, {len(log)} records once each")


# How long the dropped call takes to fail; lookups fail for twice as long.
LATE_FAILURE_S = 0.3


def _fail_late() -> Any:
    """The answer of an append that never reached the partition, `LATE_FAILURE_S` late."""
    time.sleep(LATE_FAILURE_S)
    raise BrokerNotAvailableError("the partition's actor died before the append reached it")


class DroppingHandle:
    """A partition handle that forwards every append but call `drop_at`, which fails `LATE_FAILURE_S` later,
    unwritten (its actor died first); any other method is the handle's own."""

    def __init__(self, handle: Any, drop_at: int) -> None:
        import ray

        self._handle = handle
        self._drop_at = drop_at
        self._fail = ray.remote(num_cpus=0)(_fail_late)
        self.calls = 0
        self.append = self

    def remote(self, payload: bytes, required_acks: int = 1) -> Any:
        self.calls += 1
        if self.calls == self._drop_at:
            return self._fail.remote()
        return self._handle.append.remote(payload, required_acks)

    def __getattr__(self, method: str) -> Any:
        return getattr(self._handle, method)


def test_batches_whose_lookup_failed_behind_a_failing_call_are_sent_after_its_retry(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (CI, the kill -9 test): the route forgets a leader when a call's failure reaches it, a moment
    before the producer's sender sees that failure. A lookup in that moment failed (the actor restarting), and
    the sender resolved those unsent batches before the failed call's: they took the next sequences and went
    ahead of the call's retry, were refused OUT_OF_ORDER_SEQUENCE_NUMBER and failed for good. Here the route
    forgets the leader as the dropped call is sent, and lookups fail until after that call failed."""
    topic = "late-failure"
    drop_at = 3
    Admin(broker).create_topic(topic, 1)
    dropping = DroppingHandle(broker.partition(topic, 0), drop_at)
    state = broker.topic(topic).state(0)
    lookups_fail_until = [0.0]
    refused_lookups = [0]

    def lookup(keys: list[Any]) -> dict[Any, Any]:
        if time.monotonic() < lookups_fail_until[0]:
            refused_lookups[0] += 1
            return dict.fromkeys(keys, BrokerNotAvailableError("the partition's actor is restarting"))
        return dict.fromkeys(keys, (dropping, state))

    send = actors.server.append_route.AppendRoute.send

    def send_then_forget(route: Any, leader: Any, topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        sent = send(route, leader, topic, partition, *args, **kwargs)
        if dropping.calls == drop_at and lookups_fail_until[0] == 0.0:
            route.forget(topic, partition)
            lookups_fail_until[0] = time.monotonic() + 2 * LATE_FAILURE_S
        return sent

    monkeypatch.setattr(actors.server.append_route, "leader_replicas", lookup)
    monkeypatch.setattr(actors.server.append_route.AppendRoute, "send", send_then_forget)
    monkeypatch.setattr(actors.channels.append_connection.AppendConnections, "for_address", lambda *_, **__: None)
    acks = Acknowledgements()
    # One batch a call (max_request_size), so batches wait behind the dropped call.
    with Producer(
        broker, linger_ms=0, batch_size=256, max_request_size=300, retry_backoff_ms=10, retries=50
    ) as producer:
        for index in range(300):
            value = f"late-{index:05d}".encode()
            acks.track(producer.send(topic, value, partition=0), value)
        producer.flush()
    assert refused_lookups[0] > 0, "no lookup failed while the dropped call was in flight: nothing was tested"
    assert not acks.failures, f"{len(acks.failures)} records failed, first: {acks.failures[0]!r}"
    log = read_partition(broker.partition(topic, 0))
    check_log_holds(log, acks.snapshot()[0])
    assert dict(log) == acks.snapshot()[0]
