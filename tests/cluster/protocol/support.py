"""What the protocol tests share: a `BrokerView` over real storage logs (no Ray), and request helpers.

`LogBrokerView` keeps one `storage.partition.log.Log` per partition in a temporary folder, so handler and socket
tests exercise the real append, read and offset code the partition actors run, in-process. Unlike the actors it
does not wait for data (a long-poll fetch answers at once); the long poll is tested against the real broker. It is
one broker: its topics have one replica each, served by whichever listener is asked, unless a test `place`s their
partitions on several brokers (leaders, epochs, replicas, ISR) for Metadata to describe.
With `splice=True` a fetch of `SENDFILE_MIN_BYTES` or more answers a `FileRegion` of the segment file, as the
real broker view does for a partition on the listener's node, so the server's `sendfile` path runs too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import ssl
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from cluster.protocol.broker_view import (
    BrokerEndpoint,
    EpochEndOffset,
    FetchedRecords,
    PartitionInfo,
    PartitionOffsets,
    TopicInfo,
)
from cluster.protocol.file_region import SENDFILE_MIN_BYTES, open_region
from cluster.protocol.framing import SIZE, Request, decode_response, encode_request, encode_response
from cluster.protocol.messages import build
from storage import file_names
from storage.config.log_config import LogConfig
from storage.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage.partition.file_slices import locate_file_slices
from storage.partition.log import Log, LogAppendInfo
from storage.records.compression import CompressionType
from storage.records.file_records import TimestampAndOffset
from storage.records.record_batch import RecordBatchBuilder, iter_batches

CLUSTER_ID = "test-cluster-id-00000"
# The controller's bound on a topic's partitions, kept small here: every partition is a real log in a temp dir.
MAX_PARTITIONS = 100


def opened_as_leader(folder: Path, config: LogConfig) -> Log:
    """The partition's log, opened as a partition actor opens it: its own leader, in the epoch the log had."""
    log = Log.open(folder, config)
    log.become_leader()
    return log


class LogBrokerView:
    """A `BrokerView` over plain storage logs under `root` (see the module docstring)."""

    def __init__(self, root: Path, config: LogConfig | None = None, splice: bool = False) -> None:
        self._root = root
        self._splice = splice
        self._config = config or LogConfig()
        self._logs: dict[tuple[str, int], Log] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._next_producer_id = 0
        self._announced: dict[int, BrokerEndpoint] = {}

    async def cluster_id(self) -> str:
        return CLUSTER_ID

    async def announce(self, endpoint: BrokerEndpoint) -> None:
        self._announced[endpoint.node_id] = endpoint

    async def withdraw(self, endpoint: BrokerEndpoint) -> None:
        if self._announced.get(endpoint.node_id) == endpoint:
            del self._announced[endpoint.node_id]

    async def brokers(self) -> list[BrokerEndpoint]:
        return [self._announced[node_id] for node_id in sorted(self._announced)]

    def place(self, topic: str, partitions: tuple[PartitionInfo, ...], replication_factor: int = 1) -> None:
        """Gives the partitions of `topic` the leaders, epochs and replicas in `partitions`, as if the controller
        had placed `replication_factor` replicas of each on several nodes' brokers."""
        self._topics[topic] = dataclasses.replace(
            self._topics[topic], replication_factor=replication_factor, partitions=partitions
        )

    async def topics(self) -> dict[str, TopicInfo]:
        return dict(self._topics)

    async def topic(self, name: str) -> TopicInfo:
        if name not in self._topics:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return self._topics[name]

    async def create_topic(
        self,
        name: str,
        partition_count: int,
        config: Mapping[str, str] | None = None,
        validate_only: bool = False,
        replication_factor: int | None = None,
    ) -> TopicInfo:
        file_names.validate_topic(name)
        if name in self._topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if not 1 <= partition_count <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"partition count {partition_count} is outside 1..{MAX_PARTITIONS}")
        if replication_factor not in (None, 1):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is not 1: this view is one broker"
            )
        log_config = LogConfig.from_properties(dict(config or {}), base=self._config)
        topic = TopicInfo(name, partition_count, name.startswith("__"))
        if validate_only:
            return topic
        for partition in range(partition_count):
            folder = self._root / file_names.partition_dir_name(name, partition)
            self._logs[(name, partition)] = opened_as_leader(folder, log_config)
        self._topics[name] = topic
        self._configs[name] = dict(config or {})
        return topic

    async def delete_topic(self, name: str) -> None:
        topic = await self.topic(name)
        for partition in range(topic.partition_count):
            self._logs.pop((name, partition)).close()
        del self._topics[name], self._configs[name]

    async def create_partitions(self, name: str, total: int, validate_only: bool = False) -> TopicInfo:
        topic = await self.topic(name)
        if not topic.partition_count < total <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"topic {name!r} has {topic.partition_count} partitions; not {total}")
        grown = dataclasses.replace(topic, partition_count=total)
        if validate_only:
            return grown
        log_config = LogConfig.from_properties(self._configs[name], base=self._config)
        for partition in range(topic.partition_count, total):
            folder = self._root / file_names.partition_dir_name(name, partition)
            self._logs[(name, partition)] = opened_as_leader(folder, log_config)
        self._topics[name] = grown
        return grown

    async def topic_config(self, name: str) -> dict[str, str]:
        await self.topic(name)
        return dict(self._configs[name])

    async def set_topic_config(self, name: str, config: Mapping[str, str], validate_only: bool = False) -> None:
        topic = await self.topic(name)
        log_config = LogConfig.from_properties(dict(config), base=self._config)
        if validate_only:
            return
        self._configs[name] = dict(config)
        for partition in range(topic.partition_count):
            self.log(name, partition).update_config(log_config)

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return self.log(topic, partition).delete_records(offset)

    async def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        log = self.log(topic, partition)
        return PartitionOffsets(log.log_start_offset, log.high_watermark, log.log_end_offset)

    async def epoch_end_offset(self, topic: str, partition: int, epoch: int) -> EpochEndOffset:
        log = self.log(topic, partition)
        return EpochEndOffset(log.leader_epoch, *log.end_offset_for_epoch(epoch))

    def log(self, topic: str, partition: int) -> Log:
        log = self._logs.get((topic, partition))
        if log is None:
            raise UnknownTopicOrPartitionError(f"no partition {topic}-{partition}")
        return log

    async def append(
        self, topic: str, partition: int, records: bytes, acks: int = 1, timeout_ms: int = 30_000
    ) -> LogAppendInfo:
        return self.log(topic, partition).append(records)

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int
    ) -> FetchedRecords:
        log = self.log(topic, partition)
        if self._splice:
            located = locate_file_slices(log, offset, max_bytes)
            if located and located[0].length >= SENDFILE_MIN_BYTES:
                region = open_region(located[0])
                if region is not None:
                    return FetchedRecords(region, log.high_watermark, log.log_start_offset)
        records = log.read(offset, max_bytes, isolation="high_watermark").records
        return FetchedRecords(bytes(records), log.high_watermark, log.log_start_offset)

    async def list_offset(self, topic: str, partition: int, timestamp: int) -> TimestampAndOffset | None:
        return self.log(topic, partition).fetch_offset_by_timestamp(timestamp)

    async def allocate_producer_id(self) -> int:
        self._next_producer_id += 1
        return self._next_producer_id - 1

    def close(self) -> None:
        for log in self._logs.values():
            log.close()


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


async def exchange(port: int, body: Any, correlation_id: int = 1) -> tuple[int, Any]:
    """Sends one request to a server on 127.0.0.1:`port` and reads its answer: (correlation id, kio response)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(encode_request(body.__api_key__, correlation_id, "test", body))
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
