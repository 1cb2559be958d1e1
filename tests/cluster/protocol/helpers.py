"""What the protocol tests share: an in-process broker to run the listener's seams over, and request helpers.

`start_broker` opens the in-process broker (`actors.core.in_process_broker.InProcessBroker`: the real controller,
replicas and group coordinator, without Ray) with the settings these tests want: few `__consumer_offsets` partitions
(every partition is a real log in a temporary folder) and no initial rebalance delay unless asked. The views the
listener runs on are the real in-process ones (`InProcessBrokerView`, and the group, transaction and security views
of `cluster.protocol.views` over an `InProcessTransport`); `GroupChannelTransport` puts the group coordinator's real
group channel between the group view and the in-process coordinator, as on Ray. The rest builds requests, runs
handlers on them and reads answers as a client would.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from actors.channels.group_channel import GroupChannel
from actors.channels.group_connection import GroupConnections
from actors.core.controller.controller import Controller
from actors.core.groups.group_membership import MembershipConfig
from actors.core.in_process_broker import InProcessBroker
from actors.core.role_metrics import NO_ROLE_METRICS, RoleMetrics
from actors.core.security.acl_bindings import AclBinding
from actors.core.security.scram import ScramCredential
from actors.metrics.recorder import BrokerMetrics
from cluster.protocol.client import WireClient
from cluster.protocol.framing import SIZE, Request, decode_response, encode_request, encode_response
from cluster.protocol.listener import KafkaListener
from cluster.protocol.messages import build
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from cluster.protocol.views.transport import AWAIT_MS
from storage.clock import Clock, MockClock
from storage.partition.log import Log
from storage.records.compression import CompressionType
from storage.records.record_batch import RecordBatchBuilder, iter_batches

# `__consumer_offsets` partitions of the test brokers: each is a real log in a temporary folder.
OFFSETS_TOPIC_PARTITIONS = 3
# How long `confluent_consume_all` polls at most, and how long it goes on once it has what was expected (to see
# nothing more comes).
READ_DEADLINE_S = 30.0
QUIET_S = 1.0
FIND_COORDINATOR = 10
# FindCoordinator v4's key types.
GROUP_KEY, TRANSACTION_KEY = 0, 1
METADATA_KEY = 3
# What a coordinator answers while it is elected or loading: the question is asked again.
COORDINATOR_RETRIED = {
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
}


def start_broker(
    root: Path,
    *,
    nodes: int = 1,
    log_dirs_per_node: int = 1,
    clock: Clock | None = None,
    initial_rebalance_delay_ms: int = 0,
    metrics: RoleMetrics = NO_ROLE_METRICS,
    **properties: str,
) -> InProcessBroker:
    """An in-process broker under `root` on `clock` (a fresh `MockClock` by default, which groups' timeouts run on),
    recording into `metrics`; `properties` in Kafka's names with dots as underscores (`min_insync_replicas="2"`)."""
    return InProcessBroker(
        root,
        nodes=nodes,
        log_dirs_per_node=log_dirs_per_node,
        properties={
            "offsets.topic.num.partitions": str(OFFSETS_TOPIC_PARTITIONS),
            "share.coordinator.state.topic.num.partitions": str(OFFSETS_TOPIC_PARTITIONS),
            # Followers' idle fetches answer within 50 ms, so stopping a replicated topic never waits 500 ms.
            "replica.fetch.wait.max.ms": "50",
            **{name.replace("_", "."): value for name, value in properties.items()},
        },
        clock=clock or MockClock(),
        membership=MembershipConfig(group_initial_rebalance_delay_ms=initial_rebalance_delay_ms),
        metrics=metrics,
    )


class _CurrentCoordinator:
    """The in-process broker's group coordinator at each call (one the broker makes again is the one called)."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._broker = broker

    def __getattr__(self, method: str) -> Any:
        return getattr(self._broker.group_coordinator, method)


class GroupChannelTransport:
    """The in-process broker's group coordinator behind its real group channel (`actors.channels.group_channel`),
    called over `GroupConnections` as a listener on the coordinator's node calls it; waits bounded as in process.
    The connections live on an event loop of their own (a listener's lives as long as they do), which each test's
    `run` awaits."""

    max_wait_ms = AWAIT_MS

    def __init__(self, broker: InProcessBroker) -> None:
        self.channel = GroupChannel(_CurrentCoordinator(broker))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="group-channel-client", daemon=True)
        self._thread.start()
        self._connections = GroupConnections(self.channel.address)

    async def _close_connections(self) -> None:
        self._connections.close()
        # The transports close their sockets on the loop's next turn.
        await asyncio.sleep(0)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        called = asyncio.run_coroutine_threadsafe(self._connections.call(method, *args, **kwargs), self._loop)
        return await asyncio.wrap_future(called)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close_connections(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self.channel.close()


# The ways a group view reaches the in-process coordinator: directly, and through its group channel.
GROUP_TRANSPORTS = ("in_process", "group_channel")


def topic_and_leader(bootstrap: str, topic: str) -> tuple[Any, str]:
    """The topic as Metadata (v12) describes it, and its partition 0's leader as `host:port` (where a share group's
    requests for it go)."""
    with WireClient(bootstrap.split(",")[0]) as any_broker:
        metadata = any_broker.request(
            METADATA_KEY,
            12,
            {
                "topics": [{"topic_id": None, "name": topic}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
    (described,) = metadata.topics
    (leader,) = [b for b in metadata.brokers if b.node_id == described.partitions[0].leader_id]
    return described, f"{leader.host}:{leader.port}"


def start_local_listener(
    broker: InProcessBroker, metrics: BrokerMetrics | None = None, view: InProcessBrokerView | None = None
) -> KafkaListener:
    """A PLAINTEXT listener on a free port of 127.0.0.1 serving `broker` in process (its topics, groups,
    transactions and credentials), one partition per topic it auto-creates, which it does not: Kafka's clients
    then reach the in-process broker without Ray. The listener records into `metrics` if given, and serves the
    partitions through `view` if given (a test's view that delays or counts calls)."""
    return KafkaListener(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": "1", "auto.create.topics.enable": "false"},
        view or InProcessBrokerView(broker),
        SecurityView.in_process(broker.controller),
        groups=GroupView.in_process(broker),
        transactions=TransactionView.in_process(broker),
        metrics=metrics,
    )


def batch(
    records: Iterable[tuple[bytes | None, bytes | None, int]], compression: CompressionType = CompressionType.NONE
) -> bytes:
    """A client's record batch (base offset 0) of (key, value, timestamp) records."""
    builder = RecordBatchBuilder(compression=compression)
    for key, value, timestamp in records:
        builder.append(key, value, timestamp=timestamp)
    return builder.build()


def records_of(data: bytes) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every record in fetched batch bytes (a trailing partial batch skipped)."""
    return [
        (record.offset, record.key, record.value, record.timestamp)
        for fetched in iter_batches(data)
        for record in fetched.records()
    ]


def request(body: Any, correlation_id: int = 1, client_id: str | None = "test") -> Request:
    """The decoded form of a request whose body is the kio object `body`."""
    return Request(body.__api_key__, body.__version__, correlation_id, client_id, body)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def fetch_v12_body(
    topic: str, fetch_offset: int, *, max_wait_ms: int = 0, current_leader_epoch: int = -1
) -> dict[str, Any]:
    """A Fetch v12 request's fields for partition 0 of `topic`, outside any fetch session, read_uncommitted, up to
    1 MiB."""
    partition = {
        "partition": 0,
        "current_leader_epoch": current_leader_epoch,
        "fetch_offset": fetch_offset,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
        "partition_max_bytes": 1 << 20,
    }
    return {
        "cluster_id": None,
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


async def exchange(port: int, body: Any, correlation_id: int = 1, client_id: str = "test") -> tuple[int, Any]:
    """Sends one request to a server on 127.0.0.1:`port` as `client_id` and reads its answer: (correlation id, kio
    response)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(encode_request(body.__api_key__, correlation_id, client_id, body))
        await writer.drain()
        (size,) = SIZE.unpack(await reader.readexactly(SIZE.size))
        payload = await reader.readexactly(size)
    finally:
        writer.close()
    response_type = load_response_schema(body.__api_key__, body.__version__)
    header, header_size = entity_reader(response_type.__header_schema__)(payload, 0)
    response, _ = entity_reader(response_type)(payload, header_size)
    return header.correlation_id, response


def answer(handler: Any, api_key: int, version: int, values: dict[str, Any]) -> Any:
    """A handler's response to the request of `api_key`/`version` built from `values`, as a client decodes it
    (encoded and decoded again, so a field the version cannot carry fails here)."""
    body = build(load_request_schema(api_key, version), values)
    response = run(handler(request(body)))
    return decode_response(encode_response(1, response)[SIZE.size :], load_response_schema(api_key, version))[1]


def read_frame(sock: socket.socket) -> bytes:
    """The payload of the next frame on `sock`, read whole; `ConnectionError` if the peer closes first."""

    def exactly(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    (size,) = SIZE.unpack(exactly(SIZE.size))
    return exactly(size)


def is_closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed `sock` (a read returns end of file or a reset)."""
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


async def answer_async(
    handler: Any, api_key: int, version: int, values: Mapping[str, Any], client_id: str = "test"
) -> Any:
    """The decoded answer of `handler` to a request of `api_key`/`version` built from `values`, awaited (several
    members' requests then run concurrently in one `asyncio.gather`)."""
    body = build(load_request_schema(api_key, version), values)
    response = await handler(request(body, client_id=client_id))
    return decode_response(encode_response(1, response)[SIZE.size :], load_response_schema(api_key, version))[1]


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one test CA: the CA itself, the server's key and chain, and two clients' keys and chains."""

    ca: Path
    server: Path
    alice: Path
    bob: Path


def make_tls_files(folder: Path) -> TlsFiles:
    """A fresh CA with a server certificate for 127.0.0.1 and client certificates `CN=alice` and `CN=bob`."""
    ca = trustme.CA()
    files = TlsFiles(folder / "ca.pem", folder / "server.pem", folder / "alice.pem", folder / "bob.pem")
    ca.cert_pem.write_to_path(str(files.ca))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(files.server))
    for path, name in ((files.alice, "alice"), (files.bob, "bob")):
        ca.issue_cert(f"{name}@example.org", common_name=name).private_key_and_cert_chain_pem.write_to_path(str(path))
    return files


def add_user(controller: Controller, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> None:
    """Gives `user` a SCRAM credential for `password`, as `raybroker users` does through the controller."""
    controller.upsert_scram_credential(user, ScramCredential.from_password(mechanism, password))


def add_acls(controller: Controller, *bindings: AclBinding) -> None:
    controller.create_acls(list(bindings))


async def pipelined(port: int, api_key: int, version: int, bodies: list[Any]) -> list[tuple[int, Any]]:
    """Sends every request of `bodies` (correlation ids 0, 1, ...) before reading any answer, on one connection to
    127.0.0.1:`port`; (correlation id, response) of each answer, in the order they came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    response_type = load_response_schema(api_key, version)
    answers = []
    try:
        writer.write(b"".join(encode_request(api_key, index, "test", body) for index, body in enumerate(bodies)))
        await writer.drain()
        for _ in bodies:
            (size,) = SIZE.unpack(await reader.readexactly(SIZE.size))
            answers.append(decode_response(await reader.readexactly(size), response_type))
    finally:
        writer.close()
    return answers


def leader_log(view: InProcessBrokerView, topic: str, partition: int) -> Log:
    """The `Log` of the partition's leader replica in the view's in-process broker (to seed records or look at
    what a request left)."""
    return view.broker.leader(topic, partition).log


def commit_offsets(broker: InProcessBroker, offsets: Mapping[tuple[str, str, int], int]) -> None:
    """Commits each (group, topic, partition) offset through the broker's group coordinator, as a Python
    `Consumer.commit` does."""
    for (group, topic, partition), offset in offsets.items():
        broker.group_coordinator.commit(group, {(topic, partition): offset})


def committed_offsets(broker: InProcessBroker) -> dict[tuple[str, str, int], int]:
    """Every committed offset the broker's group coordinator holds, by (group, topic, partition)."""
    coordinator = broker.group_coordinator
    return {
        (described.group_id, topic, partition): committed.offset
        for described in coordinator.list_groups()
        for (topic, partition), committed in coordinator.group_offsets(described.group_id).items()
    }


def coordinator_client(bootstrap: str, key: str, key_type: int, deadline_s: float = 30.0) -> WireClient:
    """A connection to the coordinator of `key` (a group, `GROUP_KEY`, or a transactional id, `TRANSACTION_KEY`) as
    FindCoordinator v4 names it, asked through the first of `bootstrap`'s addresses until it is not a
    `COORDINATOR_RETRIED` answer; the caller closes it."""
    deadline = time.monotonic() + deadline_s
    with WireClient(bootstrap.split(",")[0], timeout_s=deadline_s) as client:
        while True:
            found = client.request(FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
            (coordinator,) = found.coordinators
            if coordinator.error_code not in COORDINATOR_RETRIED:
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.1)
    assert coordinator.error_code == ErrorCode.none, found
    return WireClient(f"{coordinator.host}:{coordinator.port}", timeout_s=deadline_s)


def assigned_member(bootstrap: str, group: str, topic: str, deadline_s: float = 30.0) -> Any:
    """A confluent-kafka consumer of `group` subscribed to `topic` (10 s sessions, heartbeats every 500 ms, no
    auto-commit), returned once the group assigned it its partitions; the caller closes it."""
    from confluent_kafka import Consumer

    member = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 500,
            "log_level": 0,
        }
    )
    member.subscribe([topic])
    deadline = time.monotonic() + deadline_s
    while not member.assignment():
        if time.monotonic() > deadline:
            member.close()
            raise AssertionError(f"no assignment for a member of {group} within {deadline_s} s")
        member.poll(0.2)
    return member


def confluent_consume_all(
    bootstrap: str, topic: str, partitions: int, isolation: str, expected: int
) -> tuple[list[tuple[int, int, bytes]], dict[int, tuple[int, int]]]:
    """(partition, offset, value) of what a confluent consumer at `isolation` reads of every partition of `topic`
    from offset 0, polled until `expected` records came and then `QUIET_S` more, within `READ_DEADLINE_S`; and each
    partition's watermarks as it finds them (ListOffsets at its isolation level: the high one is the last stable
    offset for read_committed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": "false",
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0) for partition in range(partitions)])
        received: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + READ_DEADLINE_S
        quiet_until: float | None = None
        while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
            for message in consumer.consume(num_messages=100, timeout=0.2):
                assert message.error() is None, message.error()
                received.append((message.partition(), message.offset(), message.value()))
            if len(received) >= expected and quiet_until is None:
                quiet_until = time.monotonic() + QUIET_S
        watermarks = {
            partition: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            for partition in range(partitions)
        }
        return received, watermarks
    finally:
        consumer.close()
