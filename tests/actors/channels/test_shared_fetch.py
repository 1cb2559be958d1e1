"""Fetches of many partitions over the replica channel, real TCP sockets on this node's address: the channel's answer
to a `SharedFetchRequest` (`actors.channels.replica_channel`) checked against each partition's fetch alone, its wait
for a change to any partition, its `replica.fetch.response.max.bytes`; and the follower's end
(`actors.channels.shared_fetch`) copying two leaders' logs (real `PartitionLogActor`s, the plain class, no Ray) into
two `ReplicaFetcher`s' logs over one connection, handing back a refused partition with the leader's typed error and
every partition of a channel it cannot reach."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray

from actors.channels import replica_channel, shared_fetch
from actors.channels.leader_connection import LeaderConnection
from actors.channels.replica_channel import ReplicaChannelAddress, ServedReplica
from actors.channels.replica_fetch_frames import (
    PartitionFetch,
    ReplicaFetchRequest,
    SharedFetchRequest,
    decode_request,
    encode_request,
)
from actors.core.replication.follower import ReplicaFetch, ReplicaFetcher, ReplicaSettings, SharedFetchMember
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.server.partition_log import PartitionLogActor
from storage.config.log_config import LogConfig
from storage.errors import BrokerNotAvailableError, FencedLeaderEpochError, RaybrokerError
from storage.partition.log import Log
from tests.storage.builders import batch_bytes, simple_records

TIMEOUT_S = 5.0
TOPICS = ("left", "right")
EPOCH = 4
FOLLOWER = "follower-node"
MAX_BYTES = 1 << 20


def node() -> str:
    """The actor's node: "" outside Ray, Ray's node id when an earlier test of the session started Ray."""
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""


def append(leader: PartitionLogActor, count: int, tag: int) -> None:
    leader.append(batch_bytes(simple_records(count, timestamp=int(time.time() * 1000), tag=tag)))


@pytest.fixture(autouse=True)
def short_idle(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Shared fetches end 0.2 s after their last partition left, and each test ends once its own have."""
    monkeypatch.setattr(shared_fetch, "IDLE_S", 0.2)
    yield
    wait_until(lambda: not shared_threads(), "a shared fetch without partitions ends once idle")


@pytest.fixture
def leaders(tmp_path: Path) -> Iterator[dict[str, PartitionLogActor]]:
    """Partition 0 of each of `TOPICS`, led in `EPOCH` by this process with `FOLLOWER` assigned: "left" holds 10
    records, "right" 5."""
    me = node()
    opened: dict[str, PartitionLogActor] = {}
    for count, topic in zip((10, 5), TOPICS, strict=True):
        actor = PartitionLogActor(str(tmp_path / f"{topic}-0"), {})
        actor.update_replication(LeaderAndIsr(topic, 0, me, EPOCH, (me, FOLLOWER), (me,)))
        for tag in range(count // 5):
            append(actor, 5, tag)
        opened[topic] = actor
    yield opened
    for actor in opened.values():
        actor.close()


@pytest.fixture
def address(leaders: dict[str, PartitionLogActor]) -> ReplicaChannelAddress:
    addresses = {actor.replica_channel() for actor in leaders.values()}
    assert len(addresses) == 1, "a process serves all its partitions on one channel"
    (served,) = addresses
    assert served is not None
    return served


@pytest.fixture
def connection(address: ReplicaChannelAddress) -> Iterator[LeaderConnection]:
    opened = LeaderConnection(address)
    yield opened
    opened.close()


def shared(
    *fetches: PartitionFetch, max_wait_ms: int = 0, response_max_bytes: int = 10 * MAX_BYTES
) -> SharedFetchRequest:
    return SharedFetchRequest(FOLLOWER, max_wait_ms, response_max_bytes, fetches)


def fetch(topic: str, offset: int, epoch: int = EPOCH) -> PartitionFetch:
    return PartitionFetch(topic, 0, offset, MAX_BYTES, epoch)


def alone(connection: LeaderConnection, topic: str, offset: int, epoch: int = EPOCH) -> ReplicaFetch | RaybrokerError:
    try:
        return connection.fetch(ReplicaFetchRequest(topic, 0, FOLLOWER, offset, MAX_BYTES, 0, epoch), TIMEOUT_S)
    except RaybrokerError as exc:
        return exc


def same(answer: ReplicaFetch | RaybrokerError, expected: ReplicaFetch | RaybrokerError) -> bool:
    if isinstance(expected, RaybrokerError):
        return type(answer) is type(expected)
    assert isinstance(answer, ReplicaFetch)
    return bytes(answer.records) == bytes(expected.records) and (
        answer.high_watermark,
        answer.log_start_offset,
        answer.log_end_offset,
    ) == (expected.high_watermark, expected.log_start_offset, expected.log_end_offset)


def test_a_request_of_many_partitions_survives_its_frame() -> None:
    request = shared(fetch("left", 3), PartitionFetch("événements", 2**31 - 1, 2**62, 7, -1), max_wait_ms=500)
    assert decode_request(encode_request(request)[4:]) == request
    one = ReplicaFetchRequest("left", 1, FOLLOWER, 9, 100, 250, EPOCH)
    assert decode_request(encode_request(one)[4:]) == SharedFetchRequest(
        FOLLOWER, 250, 100, (PartitionFetch("left", 1, 9, 100, EPOCH),)
    )


def test_each_partition_of_a_shared_fetch_is_answered_as_its_fetch_alone(connection: LeaderConnection) -> None:
    asked = [("left", 0, EPOCH), ("right", 5, EPOCH), ("left", 4, EPOCH), ("nowhere", 0, EPOCH), ("left", 0, EPOCH - 1)]
    answers = connection.fetch_many(shared(*(fetch(*one) for one in asked)), TIMEOUT_S)
    expected = [alone(connection, *one) for one in asked]
    assert len(answers) == len(asked)
    assert all(same(answer, wanted) for answer, wanted in zip(answers, expected, strict=True))
    assert isinstance(answers[3], BrokerNotAvailableError) and isinstance(answers[4], FencedLeaderEpochError)
    assert isinstance(answers[0], ReplicaFetch) and answers[0].log_end_offset == 10 and answers[0].records


def test_a_shared_fetch_waits_for_a_change_to_any_of_its_partitions(
    leaders: dict[str, PartitionLogActor], connection: LeaderConnection
) -> None:
    connection.fetch_many(shared(fetch("left", 10), fetch("right", 5)), TIMEOUT_S)
    at_ends = shared(fetch("left", 10), fetch("right", 5), max_wait_ms=300)
    started = time.monotonic()
    quiet = connection.fetch_many(at_ends, TIMEOUT_S)
    assert time.monotonic() - started >= 0.25, "nothing changed: the fetch waits its max wait"
    assert all(isinstance(answer, ReplicaFetch) and not answer.records for answer in quiet)

    timer = threading.Timer(0.2, append, (leaders["right"], 3, 9))
    timer.start()
    started = time.monotonic()
    try:
        woken = connection.fetch_many(at_ends._replace(max_wait_ms=10_000), TIMEOUT_S)
    finally:
        timer.join()
    assert time.monotonic() - started < 3, "an append to one partition answers the fetch of all"
    left, right = woken
    assert isinstance(left, ReplicaFetch) and not left.records and left.log_end_offset == 10
    assert isinstance(right, ReplicaFetch) and right.log_end_offset == 8
    assert same(right, alone(connection, "right", 5))


def test_partitions_past_the_response_max_bytes_are_answered_without_records(connection: LeaderConnection) -> None:
    first, second = connection.fetch_many(shared(fetch("left", 0), fetch("right", 0), response_max_bytes=1), TIMEOUT_S)
    assert isinstance(first, ReplicaFetch) and first.records, "the first partition's first batch always comes"
    assert isinstance(second, ReplicaFetch) and not second.records
    assert (second.high_watermark, second.log_end_offset) == (5, 5)


class Member:
    """A shared fetch's member that records what it is given: fetched from `offset` while `staying`."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.staying = True
        self.taken: list[ReplicaFetch] = []
        self.left: list[RaybrokerError | None] = []
        self.done = threading.Event()

    @property
    def max_bytes(self) -> int:
        return MAX_BYTES

    def fetch_offset(self) -> int | None:
        return self.offset if self.staying else None

    def take(self, fetched: ReplicaFetch) -> None:
        self.taken.append(fetched)
        self.offset = fetched.log_end_offset

    def leave(self, error: RaybrokerError | None) -> None:
        self.left.append(error)
        self.done.set()


def share(address: ReplicaChannelAddress, topic: str, member: SharedFetchMember, epoch: int = EPOCH) -> None:
    shared_fetch.share(
        address,
        FOLLOWER,
        topic,
        0,
        epoch,
        member,
        max_wait_ms=50,
        response_max_bytes=10 * MAX_BYTES,
        timeout_s=TIMEOUT_S,
    )


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition(), what


def test_a_refused_partition_is_handed_back_typed_while_the_others_go_on(
    leaders: dict[str, PartitionLogActor], address: ReplicaChannelAddress
) -> None:
    fenced, kept = Member(0), Member(0)
    share(address, "left", fenced, epoch=EPOCH - 1)
    share(address, "right", kept)
    assert fenced.done.wait(TIMEOUT_S)
    assert len(fenced.left) == 1 and isinstance(fenced.left[0], FencedLeaderEpochError) and not fenced.taken
    wait_until(lambda: kept.offset == 5, "the other partition is fetched to its leader's end")
    append(leaders["right"], 5, 7)
    wait_until(lambda: kept.offset == 10, "and goes on being fetched")
    kept.staying = False
    assert kept.done.wait(TIMEOUT_S) and kept.left == [None], "a member that asks to leave leaves without an error"
    wait_until(lambda: not shared_threads(), "a shared fetch without partitions ends once idle")


def test_every_partition_of_a_channel_that_cannot_be_reached_is_handed_back(address: ReplicaChannelAddress) -> None:
    unreachable = ReplicaChannelAddress(address.host, address.port, bytes(len(address.token)))
    members = [Member(0), Member(0)]
    for topic, member in zip(TOPICS, members, strict=True):
        share(unreachable, topic, member)
    for member in members:
        assert member.done.wait(TIMEOUT_S)
        assert len(member.left) == 1 and isinstance(member.left[0], BrokerNotAvailableError)
    again = Member(0)
    share(address, "left", again)
    wait_until(lambda: again.offset == 10, "the next share starts a new fetch")
    again.staying = False
    assert again.done.wait(TIMEOUT_S)


def shared_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("raybroker-shared-fetch-")]


def test_followers_of_two_partitions_copy_their_leaders_through_one_shared_fetch(
    tmp_path: Path, leaders: dict[str, PartitionLogActor], address: ReplicaChannelAddress
) -> None:
    class SharingLink:
        """A follower's link that shares its fetches; the rest from the leader's actor in process."""

        def __init__(self, topic: str) -> None:
            self.topic = topic

        def replicate(self, offset: int, max_bytes: int, max_wait_ms: int) -> ReplicaFetch:
            raise AssertionError("a follower whose link shares its fetches does not fetch alone")

        def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
            return leaders[self.topic].epoch_end_offset(epoch, EPOCH)

        def log_start_offset(self) -> int:
            return leaders[self.topic].offsets()[0]

        def share(self, member: SharedFetchMember) -> bool:
            share(address, self.topic, member)
            return True

        def close(self) -> None:
            """Nothing held: the shared fetch is the process's."""

    logs = {topic: Log.open(tmp_path / "follower" / f"{topic}-0", LogConfig.from_properties({})) for topic in TOPICS}
    fetchers = []
    for topic, log in logs.items():
        log.set_replicated(True)
        fetcher = ReplicaFetcher(topic, log, SharingLink(topic), ReplicaSettings(fetch_wait_max_ms=50), lambda: None)
        fetcher.start()
        fetchers.append(fetcher)
    try:
        wait_until(lambda: [log.log_end_offset for log in logs.values()] == [10, 5], "both copied")
        assert len(shared_threads()) == 1, "one fetch, one connection, for both partitions"
        append(leaders["left"], 5, 5)
        append(leaders["right"], 5, 6)
        wait_until(lambda: [log.high_watermark for log in logs.values()] == [15, 10], "new records copied too")
        for topic, log in logs.items():
            assert bytes(log.read(0, MAX_BYTES).records) == leaders[topic].read(0, MAX_BYTES)
            assert leaders[topic].offsets()[1] == log.log_end_offset, "the follower's progress moved the leader's"
        for fetcher in fetchers:
            fetcher.stop()
            fetcher.join(TIMEOUT_S)
        ends = [log.log_end_offset for log in logs.values()]
        append(leaders["left"], 5, 8)
        time.sleep(0.3)
        assert [log.log_end_offset for log in logs.values()] == ends, "a stopped follower's log changes no more"
    finally:
        for fetcher in fetchers:
            fetcher.stop()
        for log in logs.values():
            log.close()


def test_an_unchanged_partition_is_answered_again_without_asking_its_replica_for_a_while(
    leaders: dict[str, PartitionLogActor], address: ReplicaChannelAddress, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, int]] = []
    for topic, leader in leaders.items():
        served = leader._served_replica

        def counted(*args: int | str, topic: str = topic, served: ServedReplica = served) -> ReplicaFetch:
            asked.append((topic, int(args[1])))
            return served.fetch(*args)  # type: ignore[arg-type]

        replica_channel.serve(address.host, topic, 0, ServedReplica(counted, served.changes))
    monkeypatch.setattr(replica_channel, "UNCHANGED_REUSE_S", 0.5)
    opened = LeaderConnection(address)
    try:
        at_ends = shared(fetch("left", 10), fetch("right", 5))
        first = opened.fetch_many(at_ends, TIMEOUT_S)
        assert sorted(asked) == [("left", 10), ("right", 5)]
        asked.clear()
        again = opened.fetch_many(at_ends, TIMEOUT_S)
        assert asked == [], "nothing changed: both answered as before without asking the replicas"
        assert all(same(answer, before) for answer, before in zip(again, first, strict=True))
        append(leaders["right"], 5, 3)
        changed = opened.fetch_many(at_ends, TIMEOUT_S)
        assert asked == [("right", 5)], "a partition that changed is asked again at once"
        assert isinstance(changed[1], ReplicaFetch) and changed[1].records and changed[1].log_end_offset == 10
        asked.clear()
        opened.fetch_many(shared(fetch("left", 10), fetch("right", 10)), TIMEOUT_S)
        assert set(asked) == {("right", 10)}, "a follower asking from a new offset is asked for (again if that moved)"
        time.sleep(0.6)
        asked.clear()
        opened.fetch_many(shared(fetch("left", 10), fetch("right", 10)), TIMEOUT_S)
        assert set(asked) == {("left", 10), ("right", 10)}, "each is asked again once UNCHANGED_REUSE_S passed"
    finally:
        opened.close()
