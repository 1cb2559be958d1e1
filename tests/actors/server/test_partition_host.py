"""Partition hosts on a real local Ray (`log.partitions.per.process=4`): several partitions share one process while
each keeps an actor-like handle, its own write order and its own errors; producers and consumers work unchanged;
a killed host comes back with every partition it held; deletes free a slot; scheduled retention still runs; a
restarted log manager finds its hosts instead of duplicating them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.calls import call
from actors.clients.broker import Broker
from actors.server.host_reads import HostReads
from actors.server.partition_host import ReadCall
from actors.server.partition_lookup import HostedPartitionHandle
from storage import file_names
from storage.errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.partition.log_read import LATEST_TIMESTAMP
from storage.records.record_batch import CRC_OFFSET
from tests.actors.support import append_channel_connections, manager, now_ms, wait_for
from tests.storage.builders import Rec, as_recs, batch_bytes, kafka_decode

pytestmark = pytest.mark.ray

StartBroker = Callable[..., tuple[Broker, list[Path]]]
PER_PROCESS = 4


def fill(handle: Any, tag: str, batches: int, per_batch: int = 3) -> list[Rec]:
    written: list[Rec] = []
    for index in range(batches):
        batch = [Rec(f"k{i}".encode(), f"{tag}-{index}-{i}".encode(), now_ms()) for i in range(per_batch)]
        call(handle.append.remote(batch_bytes(batch)), timeout_s=60)
        written.extend(batch)
    return written


def read_all(handle: Any) -> list[Rec]:
    start, high_watermark, _ = call(handle.offsets.remote(), timeout_s=60)
    out: list[Rec] = []
    offset = start
    while offset < high_watermark:
        chunk = [r for r in kafka_decode(call(handle.read.remote(offset, 4096))) if r.offset >= offset]
        assert chunk
        out.extend(as_recs(chunk))
        offset = chunk[-1].offset + 1
    return out


def pid_of(handle: Any) -> int | None:
    """The hosting process's id, None while it restarts."""
    try:
        return call(handle.state.remote(), timeout_s=5).pid
    except (BrokerNotAvailableError, RequestTimedOutError):
        return None


@pytest.fixture(scope="module")
def broker(start_test_broker: StartBroker) -> tuple[Broker, list[Path]]:
    return start_test_broker(log_dirs_count=2, log_partitions_per_process=str(PER_PROCESS))


def test_partitions_share_hosts_of_at_most_n_and_keep_actor_like_handles(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    call(client.controller.create_topic.remote("shared", 6))
    handles = [client.partition("shared", p) for p in range(6)]
    assert all(isinstance(handle, HostedPartitionHandle) for handle in handles)
    pids = [call(handle.state.remote()).pid for handle in handles]
    # With the two __consumer_offsets partitions: 8 partitions in 2 processes of 4.
    offsets_pids = [call(client.partition("__consumer_offsets", p).state.remote()).pid for p in range(2)]
    every_pid = pids + offsets_pids
    assert len(set(every_pid)) == 2
    assert all(every_pid.count(pid) == PER_PROCESS for pid in set(every_pid))
    written = {p: fill(handle, f"p{p}", 2 + p) for p, handle in enumerate(handles)}
    assert {p: read_all(handle) for p, handle in enumerate(handles)} == written
    placements = [p for p in call(manager().partitions.remote()) if p.topic == "shared"]
    assert [p.partition for p in placements] == list(range(6))
    assert all((Path(p.directory) / f"shared-{p.partition}").is_dir() for p in placements)


def test_appends_submitted_without_waiting_keep_their_order_per_partition(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    call(client.controller.create_topic.remote("ordered", 3))
    handles = [client.partition("ordered", p) for p in range(3)]
    batches = {p: [[Rec(b"k", f"{p}-{i}".encode(), now_ms())] for i in range(60)] for p in range(3)}
    refs = {p: [] for p in range(3)}
    for i in range(60):  # interleaved across the partitions of one host, none awaited
        for p, handle in enumerate(handles):
            refs[p].append(handle.append.remote(batch_bytes(batches[p][i])))
    for p in range(3):
        assert [info.first_offset for info in ray.get(refs[p])] == list(range(60))
        assert read_all(handles[p]) == [batch[0] for batch in batches[p]]


def test_errors_stay_with_their_partition(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    call(client.controller.create_topic.remote("errs", PER_PROCESS + 1))
    handles = [client.partition("errs", p) for p in range(PER_PROCESS + 1)]
    # Of N + 1 new partitions, two land in the same host of N.
    bad_handle, good_handle = next(
        (a, b) for a in handles for b in handles if a is not b and a.host._actor_id == b.host._actor_id
    )
    damaged = bytearray(batch_bytes([Rec(b"k", b"v", now_ms())]))
    damaged[CRC_OFFSET] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        call(bad_handle.append.remote(bytes(damaged)))
    with pytest.raises(OffsetOutOfRangeError):
        call(bad_handle.read.remote(5))
    with pytest.raises(InvalidRequestError):
        call(bad_handle.read.remote(0, "many"))
    with pytest.raises(AttributeError):
        bad_handle.no_such_method.remote()  # as an actor handle answers
    for host_method, method in [("write", "read"), ("read", "append"), ("maintain", "_log"), ("write", "__init__")]:
        with pytest.raises(InvalidRequestError):  # a call in the wrong concurrency group, or no method at all
            call(getattr(bad_handle.host, host_method).remote("errs", bad_handle.partition, method, 0))
    assert fill(good_handle, "g", 2) == read_all(good_handle)
    assert call(bad_handle.offsets.remote()) == (0, 0, 0)


def test_producer_and_consumer_work_through_hosted_partitions(broker: tuple[Broker, list[Path]]) -> None:
    from actors import Consumer, Producer
    from actors.clients import serializers

    client, _ = broker
    call(client.controller.create_topic.remote("clients", 3))
    with Producer(client, linger_ms=1) as producer:
        futures = [producer.send("clients", {"i": i}, key=f"k{i % 7}") for i in range(300)]
        producer.flush()
        # Over the hosts' append channels: one connection to each host holding a partition of the topic.
        for pid in {pid_of(client.partition("clients", p)) for p in range(3)}:
            assert pid is not None and append_channel_connections(pid) >= 1
    sent = {}
    for i, future in enumerate(futures):
        metadata = future.result()
        sent.setdefault(metadata.partition, []).append((metadata.offset, i))
    assert {p: [offset for offset, _ in items] for p, items in sent.items()} == {
        p: list(range(len(items))) for p, items in sent.items()
    }
    with Consumer(
        client, group_id="hosted", auto_offset_reset="earliest", value_deserializer=serializers.msgpack_deserializer
    ) as consumer:
        consumer.subscribe(["clients"])
        received: list[Any] = []
        deadline = time.monotonic() + 30
        while len(received) < 300 and time.monotonic() < deadline:
            received.extend(consumer.poll(timeout_ms=200))
        consumer.commit()
    got: dict[int, list[tuple[int, int]]] = {}
    for record in received:
        got.setdefault(record.partition, []).append((record.offset, record.value["i"]))
    assert got == sent


def test_a_killed_host_reopens_every_partition_it_held(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    call(client.controller.create_topic.remote("survive", PER_PROCESS, {"segment.bytes": "2048"}))
    handles = [client.partition("survive", p) for p in range(PER_PROCESS)]
    hosts = {handle.host._actor_id for handle in handles}
    written = {p: fill(handle, f"s{p}", 10 + p) for p, handle in enumerate(handles)}
    call(handles[0].delete_records.remote(6))
    wait_for(lambda: log_start_checkpoint(log_dirs).get(("survive", 0)) == 6, what="the log start checkpoint")
    pids = {pid_of(handle) for handle in handles}
    for host in {handle.host for handle in handles if handle.host._actor_id in hosts}:
        ray.kill(host, no_restart=False)
    wait_for(lambda: all(pid_of(h) not in (None, *pids) for h in handles), what="the hosts to restart")
    assert read_all(handles[0]) == written[0][6:]  # deleted records do not come back
    for p, handle in enumerate(handles[1:], start=1):
        assert read_all(handle) == written[p]
    more = fill(handles[1], "after", 2)
    assert read_all(handles[1]) == written[1] + more
    assert len({pid_of(handle) for handle in handles}) == len(hosts)


def log_start_checkpoint(log_dirs: list[Path]) -> dict[tuple[str, int], int]:
    found: dict[tuple[str, int], int] = {}
    for directory in log_dirs:
        path = directory / file_names.LOG_START_OFFSET_CHECKPOINT
        if path.exists():
            found.update(OffsetCheckpointFile(path, read_only=True).read())
    return found


def test_a_partition_its_host_lost_is_reopened_by_the_log_manager(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    call(client.controller.create_topic.remote("lost", 1))
    handle = client.partition("lost", 0)
    written = fill(handle, "l", 4)
    # As after a host restart the log manager could not answer: the host forgets the partition.
    assert call(handle.host.remove_partition.remote("lost", 0)) is True  # its log closed, its slot gone

    def back() -> bool:
        try:
            return read_all(handle) == written
        except BrokerNotAvailableError:
            return False

    wait_for(back, what="the scheduler to reopen the lost partition")


def test_deleting_a_topic_frees_its_slots_for_the_next_partitions(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    hosts_before = {p.host._actor_id for p in all_handles(client)}
    call(client.controller.create_topic.remote("doomed", 2))
    doomed = client.partition("doomed", 0)
    fill(doomed, "d", 2)
    host_of_doomed = doomed.host._actor_id
    call(client.controller.delete_topic.remote("doomed"))
    with pytest.raises(BrokerNotAvailableError):
        call(doomed.offsets.remote())
    assert not any((d / "doomed-0").exists() for d in log_dirs)
    call(client.controller.create_topic.remote("reborn", 1))
    reborn = client.partition("reborn", 0)
    assert call(reborn.offsets.remote()) == (0, 0, 0)
    assert reborn.host._actor_id in hosts_before | {host_of_doomed}
    assert all(len(held) <= PER_PROCESS for held in host_loads(client).values())


def all_handles(client: Broker) -> list[HostedPartitionHandle]:
    return [client.partition(p.topic, p.partition) for p in call(manager().partitions.remote())]


def host_loads(client: Broker) -> dict[Any, list[tuple[str, int]]]:
    loads: dict[Any, list[tuple[str, int]]] = {}
    for handle in all_handles(client):
        loads.setdefault(handle.host._actor_id, []).append((handle.topic, handle.partition))
    return loads


def test_a_host_answers_a_question_of_many_partitions_in_one_call(broker: tuple[Broker, list[Path]]) -> None:
    """The log manager's scheduled passes ask a host once for all its partitions: each partition's answer is its
    own (as its own call's would be), a partition the host does not hold fails alone, and a method of another
    concurrency group fails the whole call."""
    client, _ = broker
    call(client.controller.create_topic.remote("asked", PER_PROCESS + 1))
    handles = [client.partition("asked", p) for p in range(PER_PROCESS + 1)]
    by_host: dict[Any, list[HostedPartitionHandle]] = {}
    for handle in handles:
        by_host.setdefault(handle.host._actor_id, []).append(handle)
    here = max(by_host.values(), key=len)
    host = here[0].host
    assert len(here) >= 2
    for count, handle in enumerate(here):
        fill(handle, f"a{count}", count + 1)
    keys = [("asked", handle.partition) for handle in here] + [("asked", 99)]
    outcomes = call(host.read_each.remote("state", keys))
    assert [outcome.unwrap() for outcome in outcomes[:-1]] == [call(handle.state.remote()) for handle in here]
    assert [outcome.unwrap().log_end_offset for outcome in outcomes[:-1]] == [3 * (n + 1) for n in range(len(here))]
    with pytest.raises(BrokerNotAvailableError):
        outcomes[-1].unwrap()
    flushed = call(host.maintain_each.remote("flush_if_due", keys[:-1]))
    assert [outcome.error for outcome in flushed] == [None] * len(here)
    for host_method, method in [("read_each", "flush_if_due"), ("maintain_each", "state"), ("read_each", "_log")]:
        with pytest.raises(InvalidRequestError):
            call(getattr(host, host_method).remote(method, keys))


def test_reads_of_one_pass_go_to_each_host_as_one_call(broker: tuple[Broker, list[Path]]) -> None:
    """`HostReads`: the reads asked in one pass of an event loop reach each host as one `read_many`; each caller gets
    what its own call answers (the oracle: each partition's `list_offset` asked alone), a partition the host does not
    hold fails alone, and a method of another concurrency group fails the whole call."""
    client, _ = broker
    call(client.controller.create_topic.remote("gathered", PER_PROCESS + 2))
    handles = [client.partition("gathered", p) for p in range(PER_PROCESS + 2)]
    assert len({handle.host._actor_id for handle in handles}) >= 2
    for partition, handle in enumerate(handles):
        fill(handle, f"g{partition}", partition + 1)
    alone = [call(handle.list_offset.remote(LATEST_TIMESTAMP, "high_watermark", -1)) for handle in handles]
    missing = HostedPartitionHandle(handles[0].host, "gathered", 99)

    async def gathered() -> list[Any]:
        reads = HostReads()
        asked = [reads.read(handle, "list_offset", LATEST_TIMESTAMP, "high_watermark", -1) for handle in handles]
        return await asyncio.gather(*asked, reads.read(missing, "offsets"), return_exceptions=True)

    answers = asyncio.run(gathered())
    assert answers[:-1] == alone
    assert [found.offset for found in alone] == [3 * (p + 1) for p in range(len(handles))]
    assert isinstance(answers[-1], BrokerNotAvailableError)
    with pytest.raises(InvalidRequestError):
        call(handles[0].host.read_many.remote([ReadCall("gathered", 0, "append", (b"",))]))


def test_retention_runs_on_hosted_partitions(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    config = {"retention.ms": "1000", "segment.bytes": "1024", "file.delete.delay.ms": "100"}
    call(client.controller.create_topic.remote("expiring", 1, config))
    handle = client.partition("expiring", 0)
    fill(handle, "old", 40)
    assert call(handle.state.remote()).segments > 3
    # The closed segments expire first; the active one (records 108-119, written a moment later) is rolled and
    # deleted once its own records are past retention.ms, which leaves one empty segment at 120.
    wait_for(
        lambda: (state := call(handle.state.remote())).segments == 1 and state.log_start_offset == 120,
        what="retention to delete every segment holding records",
    )
    state = call(handle.state.remote())
    assert state.log_start_offset == state.log_end_offset == 120


def test_a_restarted_log_manager_finds_its_hosts_again(broker: tuple[Broker, list[Path]]) -> None:
    """...and knows the configs of topics created since the broker started: a host restarted after it reopens
    their partitions with them (Ray restarts the manager with its first arguments, which hold no such topic)."""
    client, _ = broker
    call(client.controller.create_topic.remote("steady", 2, {"segment.bytes": "1024"}))
    written = fill(client.partition("steady", 0), "s", 3)
    lm = manager()
    placements = call(lm.partitions.remote())
    loads = host_loads(client)
    pids = {(p.topic, p.partition): pid_of(client.partition(p.topic, p.partition)) for p in placements}
    restarts = ray._private.state.actors(actor_id=lm._actor_id.hex())["NumRestarts"]
    ray.kill(lm, no_restart=False)
    wait_for(
        lambda: ray._private.state.actors(actor_id=lm._actor_id.hex())["NumRestarts"] == restarts + 1 and _answers(lm),
        what="the log manager to restart",
    )
    assert call(lm.partitions.remote()) == placements
    assert host_loads(client) == loads
    assert {(p.topic, p.partition): pid_of(client.partition(p.topic, p.partition)) for p in placements} == pids
    assert read_all(client.partition("steady", 0)) == written
    call(client.controller.create_topic.remote("after", 1))
    assert fill(client.partition("after", 0), "a", 1) == read_all(client.partition("after", 0))
    steady = client.partition("steady", 0)
    segments, pid = call(steady.state.remote()).segments, pid_of(steady)
    ray.kill(steady.host, no_restart=False)
    wait_for(lambda: pid_of(steady) not in (None, pid), what="the host to restart")
    more = fill(steady, "m", 12)
    assert call(steady.state.remote()).segments > segments  # rolls at the topic's 1024 bytes, not the default
    assert read_all(steady) == written + more


def _answers(handle: Any) -> bool:
    try:
        call(handle.ping.remote(), timeout_s=5)
    except Exception:
        return False
    return True
