"""The same-node group channel over real abstract Unix sockets: `actors.channels.group_channel` serving the in-process
broker's real `GroupCoordinator` (no Ray), `actors.channels.group_connection` as the listener's end. The group
handlers' own tests run over it too (`tests/cluster/protocol/conftest.py`, `groups_each_way`); here: members waiting
in a JoinGroup each hold their own connection and all get the coordinator's answer, a listener out of connections
says so (its transport then calls through Ray), and bad clients (methods the channel does not serve, garbage, cut
frames) lose only their own connection while the coordinator goes on serving."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.channels.append_frames import SIZE, SOCKET_REQUEST_MAX_BYTES
from actors.channels.group_channel import GroupChannel
from actors.channels.group_connection import MAX_CONNECTIONS, GroupCaller, GroupConnections
from actors.channels.group_frames import GROUP_CODEC
from actors.core.groups.group_coordinator import GroupCoordinator
from actors.core.groups.group_membership import GroupError, JoinResult, MembershipConfig, PendingJoin
from actors.core.in_process_broker import InProcessBroker
from storage.clock import MockClock
from storage.errors import BrokerNotAvailableError, InvalidRequestError
from storage.records.consumer_offsets import OffsetAndMetadata
from tests.actors.channels.raw_clients import drained_until_closed, raw_socket, run, wait_until

TIMEOUT_S = 10.0
GROUP = "ledger"
JOIN = {
    "group_instance_id": None,
    "client_id": "client",
    "client_host": "/127.0.0.1",
    "session_timeout_ms": 10_000,
    "rebalance_timeout_ms": 30_000,
    "protocol_type": "consumer",
    "protocols": [("range", b"subscription")],
    "require_known_member_id": False,
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = InProcessBroker(
        tmp_path,
        properties={"offsets.topic.num.partitions": "1"},
        clock=MockClock(),
        membership=MembershipConfig(group_initial_rebalance_delay_ms=0),
    )
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def coordinator(broker: InProcessBroker) -> GroupCoordinator:
    return broker.group_coordinator


@pytest.fixture
def channel(coordinator: GroupCoordinator) -> Iterator[GroupChannel]:
    serving = GroupChannel(coordinator)
    yield serving
    serving.close()


async def over(address: str, method: str, *args: Any, **kwargs: Any) -> Any:
    """One call on a new `GroupConnections`: its answer, or the error it raised."""
    connections = GroupConnections(address)
    try:
        return await connections.call(method, *args, **kwargs)
    except Exception as exc:
        return exc
    finally:
        connections.close()


def still_serves(address: str, coordinator: GroupCoordinator) -> None:
    """A commit and its read on a new connection land as on the coordinator."""
    offsets = {("t", 0): OffsetAndMetadata(17, 2, "probe")}
    assert run(over(address, "commit_member", "probe", "", -1, offsets, api_version=8)) == GroupError.NONE
    assert coordinator.fetch_committed("probe", [("t", 0)]) == offsets


def test_commits_and_reads_answer_as_the_coordinator_does(channel: GroupChannel, coordinator: GroupCoordinator) -> None:
    offsets = {("orders", 0): OffsetAndMetadata(42, 3, "stream-time"), ("orders", 1): OffsetAndMetadata(7)}
    assert run(over(channel.address, "commit_member", GROUP, "", -1, offsets, api_version=9)) == GroupError.NONE
    wanted = [("orders", 0), ("orders", 1), ("orders", 2)]
    read = run(over(channel.address, "fetch_committed", GROUP, wanted))
    assert read == coordinator.fetch_committed(GROUP, wanted) == {**offsets, ("orders", 2): None}
    assert run(over(channel.address, "describe_group", GROUP)) == coordinator.describe_group(GROUP)
    assert run(over(channel.address, "partition_for", GROUP)) == 0


def test_members_waiting_in_a_join_each_hold_a_connection_and_all_get_the_answer(
    broker: InProcessBroker, channel: GroupChannel, coordinator: GroupCoordinator
) -> None:
    members = 12

    async def rebalance() -> list[JoinResult]:
        connections = GroupConnections(channel.address)
        try:
            first = await _joined(connections)
            assert first.error == GroupError.NONE
            # The others join the stable group: it rebalances and each waits for the rest (and the first member's
            # rejoin) on a connection of its own.
            waiting = [asyncio.ensure_future(connections.call("join_group", GROUP, "", **JOIN)) for _ in range(members)]
            pending = list(await asyncio.gather(*waiting))
            assert all(isinstance(answer, PendingJoin) for answer in pending)
            awaited = [asyncio.ensure_future(_until_joined(connections, answer.member_id)) for answer in pending]
            await asyncio.sleep(0.1)
            assert channel.connection_count >= min(members, MAX_CONNECTIONS)
            rejoined = await connections.call("join_group", GROUP, first.member_id, **JOIN)
            rejoined = (
                rejoined if isinstance(rejoined, JoinResult) else await _until_joined(connections, first.member_id)
            )
            return [rejoined, *await asyncio.gather(*awaited)]
        finally:
            connections.close()

    results = run(rebalance())
    assert {result.error for result in results} == {GroupError.NONE}
    assert {result.generation_id for result in results} == {2}
    leaders = [result for result in results if result.members]
    assert len(leaders) == 1 and len(leaders[0].members) == members + 1
    described = coordinator.describe_group(GROUP)
    assert described is not None and len(described.members) == members + 1


async def _joined(connections: GroupConnections) -> JoinResult:
    """A new member's join of the empty group, answered."""
    answer = await connections.call("join_group", GROUP, "", **JOIN)
    return answer if isinstance(answer, JoinResult) else await _until_joined(connections, answer.member_id)


async def _until_joined(connections: GroupConnections, member_id: str) -> JoinResult:
    while True:
        answer = await connections.call("await_join", GROUP, member_id, 50)
        if isinstance(answer, JoinResult):
            return answer


def test_a_listener_out_of_connections_says_so(channel: GroupChannel, coordinator: GroupCoordinator) -> None:
    async def exhaust() -> tuple[bool, bool, bool]:
        connections = GroupConnections(channel.address)
        try:
            await _joined(connections)
            joined = [await connections.call("join_group", GROUP, "", **JOIN) for _ in range(3)]
            before = connections.has_free_connection
            waits = [
                asyncio.ensure_future(connections.call("await_join", GROUP, joined[index % 3].member_id, 3000))
                for index in range(MAX_CONNECTIONS)
            ]
            await asyncio.sleep(0.2)
            during = connections.has_free_connection
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
            return before, during, connections.has_free_connection
        finally:
            connections.close()

    assert run(exhaust()) == (True, False, True)
    still_serves(channel.address, coordinator)


@pytest.mark.parametrize("method", ["commit", "on_topic_deleted", "_write", "__class__", "group_channel", "x" * 300])
def test_methods_the_channel_does_not_serve_are_refused_and_end_their_connection(
    channel: GroupChannel, coordinator: GroupCoordinator, method: str
) -> None:
    with raw_socket(channel.address) as sock:
        sock.sendall(GROUP_CODEC.encode_request(method, (GROUP, {("t", 0): 5}), {}))
        received = drained_until_closed(sock)
    (size,) = SIZE.unpack_from(received)
    error = GROUP_CODEC.decode_answer(received[SIZE.size : SIZE.size + size])
    assert type(error) is InvalidRequestError and "serves no method" in str(error)
    assert coordinator.fetch_committed(GROUP, [("t", 0)]) == {("t", 0): None}
    still_serves(channel.address, coordinator)


def test_a_method_given_arguments_it_does_not_take_is_answered_and_the_connection_goes_on(
    channel: GroupChannel, coordinator: GroupCoordinator
) -> None:
    async def twice() -> list[Any]:
        connections = GroupConnections(channel.address)
        answers: list[Any] = []
        try:
            for args in ((GROUP, "no", "such", "arguments", 1, 2, 3), (GROUP, [("t", 0)])):
                try:
                    answers.append(await connections.call("fetch_committed", *args))
                except Exception as exc:
                    answers.append(exc)
        finally:
            connections.close()
        return answers

    failed, answered = run(twice())
    assert type(failed).__name__ == "RaybrokerError" and "unexpectedly" in str(failed)
    assert answered == {("t", 0): None}


GARBAGE = {
    "size cut": b"\x00\x00",
    "body cut": SIZE.pack(40) + b"\x93\xa4join",
    "not msgpack": SIZE.pack(3) + b"\xc1\xc1\xc1",
    "text": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "over the request limit": SIZE.pack(SOCKET_REQUEST_MAX_BYTES + 1) + b"\x00" * 64,
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_and_cut_frames_end_only_their_own_connection(
    channel: GroupChannel, coordinator: GroupCoordinator, case: str
) -> None:
    with raw_socket(channel.address) as sock:
        sock.sendall(GARBAGE[case])
        sock.shutdown(socket.SHUT_WR)
        drained_until_closed(sock)
    still_serves(channel.address, coordinator)


def test_random_byte_streams_never_stop_the_coordinator(channel: GroupChannel, coordinator: GroupCoordinator) -> None:
    generator = random.Random(20261127)
    for _ in range(60):
        with raw_socket(channel.address) as sock:
            size = generator.randrange(0, 64)
            body = generator.randbytes(generator.randrange(0, size + 8))
            sock.sendall(SIZE.pack(size) + body)
            sock.shutdown(socket.SHUT_WR)
            drained_until_closed(sock)
    wait_until(lambda: channel.connection_count == 0)
    still_serves(channel.address, coordinator)


def test_a_closed_channel_fails_calls_as_broker_not_available(coordinator: GroupCoordinator) -> None:
    channel = GroupChannel(coordinator)

    async def across_the_close() -> list[Any]:
        connections = GroupConnections(channel.address)
        answers: list[Any] = [await connections.call("describe_group", GROUP)]
        channel.close()
        try:
            answers.append(await connections.call("describe_group", GROUP))
        except BrokerNotAvailableError as exc:
            answers.append(exc)
        finally:
            connections.close()
        return answers

    first, second = run(across_the_close())
    assert first is None
    assert isinstance(second, BrokerNotAvailableError) and second.retriable


def test_a_blocking_caller_completes_transactional_offsets_as_the_coordinator_does(
    channel: GroupChannel, coordinator: GroupCoordinator
) -> None:
    """The transaction coordinator's side: a TxnOffsetCommit stays pending until `complete_transaction` over the
    channel commits it (and an abort's drops it), as the coordinator's own call does."""
    committed = {("orders", 0): OffsetAndMetadata(40, 1, "")}
    partition = coordinator.partition_for(GROUP)
    caller = GroupCaller(channel.address)
    try:
        for producer_id, commit in ((11, True), (12, False)):
            offsets = {key: OffsetAndMetadata(value.offset + producer_id) for key, value in committed.items()}
            assert coordinator.commit_transactional(GROUP, producer_id, 0, "", -1, offsets) == GroupError.NONE
            assert coordinator.unstable_offsets(GROUP, None) == set(offsets)
            assert caller.call("complete_transaction", partition, producer_id, commit) is None
            assert coordinator.unstable_offsets(GROUP, None) == set()
        assert coordinator.fetch_committed(GROUP, [("orders", 0)]) == {("orders", 0): OffsetAndMetadata(51)}
    finally:
        caller.close()


def test_a_blocking_caller_fails_as_broker_not_available_once_the_channel_is_gone(
    coordinator: GroupCoordinator,
) -> None:
    first = GroupChannel(coordinator)
    caller = GroupCaller(first.address)
    try:
        assert caller.call("describe_group", GROUP) is None
        first.close()
        with pytest.raises(BrokerNotAvailableError) as broken:
            caller.call("describe_group", GROUP)
        assert broken.value.retriable
    finally:
        caller.close()


def test_a_blocking_callers_refused_call_raises_the_refusal_and_the_next_call_is_answered(
    channel: GroupChannel,
) -> None:
    """The channel ends the connection of a call it refuses; the caller's next call opens another."""
    caller = GroupCaller(channel.address)
    try:
        with pytest.raises(InvalidRequestError, match="serves no method"):
            caller.call("commit", GROUP, {("t", 0): 1})
        assert caller.call("describe_group", GROUP) is None
    finally:
        caller.close()
