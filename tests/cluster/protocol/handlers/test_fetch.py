"""Fetch: records come back as produced with the partition's offsets; limits per partition and per response
follow Kafka's rules; errors are per partition; topics are named by id from v13; sessions send only what changed and
answer Kafka's session errors; every served version encodes."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from actors.metrics.names import BYTES_OUT
from actors.metrics.recorder import MetricsRecorder
from cluster.protocol.fetch_session import FetchSessionCache
from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.handlers.fetch import FETCH_KEY, FetchHandler
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from storage.clock import MockClock
from tests.cluster.protocol.helpers import batch, leader_log, records_of, request, run

VERSIONS = range(SERVED[FETCH_KEY].min_version, SERVED[FETCH_KEY].max_version + 1)


class Fetcher:
    """A client of one `FetchHandler` (its fetch sessions kept between calls) on the in-process broker: requests name
    topics by name up to v12 and by id from v13, and answers come back keyed by (topic name, partition)."""

    def __init__(
        self,
        view: InProcessBrokerView,
        metrics: MetricsRecorder | None = None,
        sessions: FetchSessionCache | None = None,
    ) -> None:
        self.view = view
        self.handler = FetchHandler(
            view,
            metrics=metrics or MetricsRecorder(),
            sessions=FetchSessionCache(10, MockClock()) if sessions is None else sessions,
        )

    def __call__(
        self,
        version: int,
        positions: dict[tuple[str, int], int],
        partition_max_bytes: int = 1 << 20,
        max_bytes: int = 50 << 20,
        session_id: int = 0,
        epoch: int = -1,
        forgotten: Iterable[tuple[str, int]] = (),
        ids: Mapping[str, uuid.UUID] | None = None,
        leader_epochs: Mapping[tuple[str, int], int] | None = None,
        max_wait_ms: int = 0,
    ) -> tuple[Any, dict[tuple[str, int], Any]]:
        """The decoded answer and its partitions; `ids` names topics the broker may not know (v13+), and
        `leader_epochs` the `current_leader_epoch` of partitions (v9+; -1 for the others)."""
        names = dict(run(self.view.topic_names()))
        ids = {**{name: topic_id for topic_id, name in names.items()}, **(ids or {})}
        names.update({topic_id: name for name, topic_id in ids.items()})
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in positions.items():
            topics.setdefault(topic, []).append(
                {
                    "partition": partition,
                    "current_leader_epoch": (leader_epochs or {}).get((topic, partition), -1),
                    "fetch_offset": offset,
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": partition_max_bytes,
                }
            )
        dropped: dict[str, list[int]] = {}
        for topic, partition in forgotten:
            dropped.setdefault(topic, []).append(partition)
        body = build(
            load_request_schema(FETCH_KEY, version),
            {
                "cluster_id": None,
                "replica_id": -1,
                "max_wait": max_wait_ms,
                "min_bytes": 1,
                "max_bytes": max_bytes,
                "isolation_level": 0,
                "session_id": session_id,
                "session_epoch": epoch,
                "topics": [
                    {"topic": name, "topic_id": ids.get(name), "partitions": parts} for name, parts in topics.items()
                ],
                "forgotten_topics_data": [
                    {"topic": name, "topic_id": ids.get(name), "partitions": parts} for name, parts in dropped.items()
                ],
                "rack_id": "",
            },
        )
        response = run(self.handler(request(body)))
        _, decoded = decode_response(encode_response(1, response)[4:], load_response_schema(FETCH_KEY, version))
        return decoded, {
            (names[t.topic_id] if version >= 13 else t.topic, p.partition_index): p
            for t in decoded.responses
            for p in t.partitions
        }


def fetch(
    view: InProcessBrokerView,
    version: int,
    positions: dict[tuple[str, int], int],
    partition_max_bytes: int = 1 << 20,
    max_bytes: int = 50 << 20,
    metrics: MetricsRecorder | None = None,
) -> tuple[Any, dict[tuple[str, int], Any]]:
    """One sessionless fetch."""
    return Fetcher(view, metrics)(version, positions, partition_max_bytes, max_bytes)


def fill(view: InProcessBrokerView, topic: str, partition: int, count: int, value_size: int = 10) -> None:
    for index in range(count):
        leader_log(view, topic, partition).append(batch([(b"%d" % index, bytes(value_size), 1000 + index)]))


@pytest.mark.parametrize("version", VERSIONS)
def test_records_come_back_with_the_partition_offsets(view: InProcessBrokerView, version: int) -> None:
    run(view.create_topic("t", 2))
    fill(view, "t", 0, 3)
    _, answers = fetch(view, version, {("t", 0): 1, ("t", 1): 0})
    zero, one = answers[("t", 0)], answers[("t", 1)]
    assert zero.error_code == ErrorCode.none
    assert [(offset, key) for offset, key, _, _ in records_of(zero.records)] == [(1, b"1"), (2, b"2")]
    assert (zero.high_watermark, zero.last_stable_offset) == (3, 3)
    assert (one.error_code, one.high_watermark, one.records) == (ErrorCode.none, 0, b"")
    if version >= 5:
        assert zero.log_start_offset == 0
    if version >= 11:
        assert zero.preferred_read_replica == -1


def test_an_offset_past_the_end_is_out_of_range_and_an_unknown_partition_unknown(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    fill(view, "t", 0, 2)
    _, answers = fetch(view, 12, {("t", 0): 3, ("t", 5): 0, ("nope", 0): 0})
    assert answers[("t", 0)].error_code == ErrorCode.offset_out_of_range
    assert answers[("t", 5)].error_code == ErrorCode.unknown_topic_or_partition
    assert answers[("nope", 0)].error_code == ErrorCode.unknown_topic_or_partition


def test_partition_max_bytes_cuts_but_always_returns_one_batch(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    fill(view, "t", 0, 5, value_size=100)
    _, answers = fetch(view, 12, {("t", 0): 0}, partition_max_bytes=10)
    assert [offset for offset, _, _, _ in records_of(answers[("t", 0)].records)] == [0]


def test_max_bytes_leaves_out_later_partitions_but_never_the_first_with_data(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 3))
    for partition in range(3):
        fill(view, "t", partition, 2, value_size=200)
    _, answers = fetch(view, 12, {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}, max_bytes=10)
    assert len(records_of(answers[("t", 0)].records)) == 2
    assert answers[("t", 1)].records == answers[("t", 2)].records == b""
    assert answers[("t", 1)].high_watermark == 2


def test_bytes_out_count_what_the_answers_carry_after_the_response_limit(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 3))
    run(view.create_topic("u", 1))
    for partition in range(3):
        fill(view, "t", partition, 2, value_size=200)
    fill(view, "u", 0, 4)
    metrics = MetricsRecorder()
    _, answers = fetch(view, 12, {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}, max_bytes=10, metrics=metrics)
    assert metrics.value(BYTES_OUT, "t") == len(answers[("t", 0)].records) > 0  # the left-out partitions: nothing
    _, answers = fetch(view, 12, {("t", 1): 0, ("u", 0): 1}, metrics=metrics)
    read_whole = leader_log(view, "t", 0).size_in_bytes + leader_log(view, "t", 1).size_in_bytes
    assert metrics.value(BYTES_OUT, "t") == read_whole
    assert metrics.value(BYTES_OUT, "u") == len(answers[("u", 0)].records) > 0
    assert metrics.value(BYTES_OUT, "") == metrics.value(BYTES_OUT, "t") + metrics.value(BYTES_OUT, "u")


def test_an_unknown_topic_id_answers_unknown_topic_id_for_each_partition(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    fill(view, "t", 0, 1)
    gone = uuid.UUID(int=2**100 + 7)
    decoded, answers = fetch_by(view, {("t", 0): 0, ("gone", 0): 0, ("gone", 1): 0}, ids={"gone": gone})
    assert answers[("t", 0)].error_code == ErrorCode.none and len(records_of(answers[("t", 0)].records)) == 1
    assert [answers[("gone", p)].error_code for p in (0, 1)] == [ErrorCode.unknown_topic_id] * 2
    assert [topic.topic_id for topic in decoded.responses] == [run(view.topic("t")).topic_id, gone]


def fetch_by(view: InProcessBrokerView, positions: dict[tuple[str, int], int], **kwargs: Any) -> Any:
    return Fetcher(view)(SERVED[FETCH_KEY].max_version, positions, **kwargs)


# --- fetch sessions (KIP-227) ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [7, 12, 13, 17])
def test_a_session_sends_only_the_partitions_that_changed(view: InProcessBrokerView, version: int) -> None:
    run(view.create_topic("t", 3))
    fill(view, "t", 0, 2)
    client = Fetcher(view)
    everything = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    decoded, answers = client(version, everything, epoch=0)
    session = decoded.session_id
    assert session > 0 and decoded.error_code == ErrorCode.none
    assert set(answers) == set(everything) and len(records_of(answers[("t", 0)].records)) == 2
    # Only the moved position is listed; nothing changed since: nothing is sent.
    decoded, answers = client(version, {("t", 0): 2}, session_id=session, epoch=1)
    assert (decoded.error_code, decoded.session_id, answers) == (ErrorCode.none, session, {})
    # New records on a partition nobody listed: the session fetches it from the remembered position.
    fill(view, "t", 1, 1)
    decoded, answers = client(version, {}, session_id=session, epoch=2)
    assert set(answers) == {("t", 1)} and [r[0] for r in records_of(answers[("t", 1)].records)] == [0]
    # A forgotten partition is no longer fetched; listed again, it is.
    fill(view, "t", 2, 1)
    _, answers = client(version, {("t", 1): 1}, session_id=session, epoch=3, forgotten=[("t", 2)])
    assert answers == {}
    _, answers = client(version, {("t", 2): 0}, session_id=session, epoch=4)
    assert set(answers) == {("t", 2)} and answers[("t", 2)].high_watermark == 1
    # A moved log start offset is news too, without records.
    run(view.delete_records("t", 0, 1))
    _, answers = client(version, {("t", 2): 1}, session_id=session, epoch=5)
    assert set(answers) == {("t", 0)} and answers[("t", 0)].log_start_offset == 1


def test_a_partition_in_error_is_sent_every_time(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    fill(view, "t", 0, 1)
    client = Fetcher(view)
    decoded, answers = client(12, {("t", 0): 5}, epoch=0)
    assert answers[("t", 0)].error_code == ErrorCode.offset_out_of_range
    for epoch in (1, 2):
        _, answers = client(12, {}, session_id=decoded.session_id, epoch=epoch)
        assert answers[("t", 0)].error_code == ErrorCode.offset_out_of_range
    # Back in range at the end of the log: sent once (its high watermark is news after an error), then not.
    _, answers = client(12, {("t", 0): 1}, session_id=decoded.session_id, epoch=3)
    assert (answers[("t", 0)].error_code, answers[("t", 0)].high_watermark) == (ErrorCode.none, 1)
    assert client(12, {}, session_id=decoded.session_id, epoch=4)[1] == {}


@pytest.mark.parametrize(
    ("session_id", "epoch", "version", "error"),
    [
        (12345, 1, 12, ErrorCode.fetch_session_id_not_found),
        (None, 2, 12, ErrorCode.invalid_fetch_session_epoch),
        (None, 1, 13, ErrorCode.fetch_session_topic_id_error),
    ],
)
def test_session_errors_answer_their_code_and_no_partition(
    view: InProcessBrokerView, session_id: int | None, epoch: int, version: int, error: ErrorCode
) -> None:
    run(view.create_topic("t", 1))
    client = Fetcher(view)
    opened = client(12, {("t", 0): 0}, epoch=0)[0].session_id
    decoded, answers = client(version, {("t", 0): 0}, session_id=session_id or opened, epoch=epoch)
    assert (decoded.error_code, decoded.session_id, answers) == (error, 0, {})


def test_a_full_request_closes_the_session_it_names(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    client = Fetcher(view)
    opened = client(12, {("t", 0): 0}, epoch=0)[0].session_id
    decoded, answers = client(12, {("t", 0): 0}, session_id=opened, epoch=-1)
    assert (decoded.error_code, decoded.session_id, set(answers)) == (ErrorCode.none, 0, {("t", 0)})
    assert client(12, {}, session_id=opened, epoch=1)[0].error_code == ErrorCode.fetch_session_id_not_found
    assert len(client.handler.sessions) == 0


def test_no_session_is_opened_without_a_cache_slot(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    decoded, answers = Fetcher(view, sessions=FetchSessionCache(0, MockClock()))(12, {("t", 0): 0}, epoch=0)
    assert (decoded.error_code, decoded.session_id, set(answers)) == (ErrorCode.none, 0, {("t", 0)})


# --- leader epochs (KIP-320) -----------------------------------------------------------------------------------

# Partition 0 of `re_elected` is led in epoch 1: the `current_leader_epoch` a client sends for it, and its answer.
FENCING = [
    (-1, ErrorCode.none),  # not checked
    (-2, ErrorCode.none),  # not checked either: Kafka's `FetchRequest` reads every negative epoch as none
    (1, ErrorCode.none),  # the leader's epoch
    (0, ErrorCode.fenced_leader_epoch),  # the client's metadata names the lost leader
    (2, ErrorCode.unknown_leader_epoch),  # an epoch the leader has not been told of
]


def fill_led(view: InProcessBrokerView) -> None:
    """Two records in each partition of `re_elected`'s topic, written by their leaders now."""
    for partition in range(2):
        run(view.append("led", partition, batch([(b"k", b"v", 1000), (b"k", b"w", 1001)])))


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 9])
@pytest.mark.parametrize(("current_leader_epoch", "error"), FENCING)
def test_a_client_leader_epoch_older_or_newer_than_the_leaders_is_fenced_per_partition(
    re_elected: InProcessBrokerView, version: int, current_leader_epoch: int, error: ErrorCode
) -> None:
    """Kafka's `Partition.localLogWithEpochOrThrow`: the checked partition answers its error without records or
    offsets; partition 1, fetched beside it in its own epoch (0), is answered as ever."""
    fill_led(re_elected)
    _, answers = Fetcher(re_elected)(
        version, {("led", 0): 0, ("led", 1): 0}, leader_epochs={("led", 0): current_leader_epoch, ("led", 1): 0}
    )
    checked, beside = answers[("led", 0)], answers[("led", 1)]
    assert checked.error_code == error
    if error == ErrorCode.none:
        assert ([offset for offset, *_ in records_of(checked.records)], checked.high_watermark) == ([0, 1], 2)
    else:
        assert (checked.records, checked.high_watermark, checked.log_start_offset) == (b"", -1, -1)
    assert beside.error_code == ErrorCode.none
    assert [offset for offset, *_ in records_of(beside.records)] == [0, 1]


@pytest.mark.parametrize("version", [4, 8])
def test_versions_before_9_carry_no_leader_epoch_and_are_not_fenced(
    re_elected: InProcessBrokerView, version: int
) -> None:
    fill_led(re_elected)
    _, answers = Fetcher(re_elected)(version, {("led", 0): 0}, leader_epochs={("led", 0): 0})
    assert answers[("led", 0)].error_code == ErrorCode.none
    assert [offset for offset, *_ in records_of(answers[("led", 0)].records)] == [0, 1]


def test_a_session_keeps_each_partitions_leader_epoch_until_it_is_listed_again(re_elected: InProcessBrokerView) -> None:
    """As Kafka's `CachedPartition`: a partition opened in a stale epoch stays fenced while the session's requests
    leave it out, and is read once a request lists it with the leader's epoch."""
    fill_led(re_elected)
    client = Fetcher(re_elected)
    decoded, answers = client(12, {("led", 0): 0, ("led", 1): 0}, epoch=0, leader_epochs={("led", 0): 0})
    session = decoded.session_id
    assert [answers[("led", p)].error_code for p in range(2)] == [ErrorCode.fenced_leader_epoch, ErrorCode.none]
    # Partition 1 moves on to its end (nothing new to send); partition 0 is left out of the request.
    _, answers = client(12, {("led", 1): 2}, session_id=session, epoch=1)
    assert {key: answer.error_code for key, answer in answers.items()} == {("led", 0): ErrorCode.fenced_leader_epoch}
    _, answers = client(12, {("led", 0): 0}, session_id=session, epoch=2, leader_epochs={("led", 0): 1})
    assert answers[("led", 0)].error_code == ErrorCode.none
    assert [offset for offset, *_ in records_of(answers[("led", 0)].records)] == [0, 1]


def test_a_fetch_waiting_for_bytes_is_fenced_as_soon_as_the_leader_changes(re_elected: InProcessBrokerView) -> None:
    """A fetch waiting at the end of partition 0 in its leader's epoch (1) looks again when the partition's role
    changes: leadership going back to the restarted preferred replica (epoch 2) answers FENCED_LEADER_EPOCH at once,
    as Kafka's `DelayedFetch` completes on an epoch change, not when its 10 s wait is up."""
    broker = re_elected.broker
    state = broker.controller.partition_state("led", 0)
    (preferred,) = [node for node in state.replicas if node != state.leader]
    broker.restart_node(preferred)
    deadline = time.monotonic() + 10
    while preferred not in broker.controller.partition_state("led", 0).isr:
        assert time.monotonic() < deadline, "the restarted replica never rejoined the ISR"
        time.sleep(0.01)
    election = threading.Timer(0.2, broker.controller.rebalance_leaders)
    started = time.monotonic()
    election.start()
    try:
        _, answers = Fetcher(re_elected)(12, {("led", 0): 0}, leader_epochs={("led", 0): 1}, max_wait_ms=10_000)
    finally:
        election.join()
    waited_s = time.monotonic() - started
    assert broker.controller.partition_state("led", 0).leader_epoch == 2
    assert answers[("led", 0)].error_code == ErrorCode.fenced_leader_epoch
    assert waited_s < 5
