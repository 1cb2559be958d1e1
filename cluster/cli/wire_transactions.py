"""`raybroker transactions --abort --bootstrap-server HOST:PORT`: a hanging transaction aborted over Kafka's
protocol, as kafka-transactions.sh's `abort` does it, so the same command works on raybroker's listener and on any
Kafka broker. Metadata finds the partition's leader; with a start offset, DescribeProducers on the leader finds the
producer whose open transaction starts there; one WriteTxnMarkers then writes its ABORT marker on the leader. A
coordinator epoch of -1 (a producer that never saw a marker) is sent as 0, as Kafka's tool sends it. A refusal
raises the typed error of the broker's code (`cluster.protocol.error_codes.typed_error`), which the CLI prints on one
line.
"""

from __future__ import annotations

from cluster.protocol.client import WireClient
from cluster.protocol.error_codes import typed_error
from cluster.protocol.handlers.metadata import METADATA_KEY
from cluster.protocol.handlers.transactions import DESCRIBE_PRODUCERS_KEY, WRITE_TXN_MARKERS_KEY
from storage.errors import InvalidTxnStateError, UnknownTopicOrPartitionError
from storage.partition.producer_state import NO_TXN, ActiveProducer

# The first Metadata version with `allow_auto_topic_creation`: looking a partition up never creates its topic.
METADATA_VERSION = 4
WRITE_TXN_MARKERS_VERSION = 1


def abort_transaction(
    bootstrap_server: str,
    topic: str,
    partition: int,
    start_offset: int | None,
    producer: tuple[int, int] | None,
    coordinator_epoch: int | None,
) -> tuple[int, int, int]:
    """Aborts the open transaction on the partition that starts at `start_offset`, or that of `producer` (id,
    epoch) with `coordinator_epoch`; (producer id, epoch, coordinator epoch) of the marker written."""
    with WireClient(leader_address(bootstrap_server, topic, partition)) as leader:
        if start_offset is not None:
            found = open_transaction_at(leader, topic, partition, start_offset)
            producer_id, epoch, coordinator_epoch = found.producer_id, found.producer_epoch, found.coordinator_epoch
        else:
            assert producer is not None and coordinator_epoch is not None, "the caller names the producer"
            producer_id, epoch = producer
        coordinator_epoch = max(coordinator_epoch, 0)
        marker = {
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "transaction_result": False,
            "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": topic, "partition_indexes": [partition]}],
        }
        response = leader.request(WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION, {"markers": [marker]})
    code = response.markers[0].topics[0].partitions[0].error_code
    if code:
        raise typed_error(code, f"the ABORT marker on {topic}-{partition} was refused")
    return producer_id, epoch, coordinator_epoch


def leader_address(bootstrap_server: str, topic: str, partition: int) -> str:
    """HOST:PORT of the partition's leader, as Metadata names it."""
    with WireClient(bootstrap_server) as client:
        found = client.request(
            METADATA_KEY, METADATA_VERSION, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
        )
    brokers = {broker.node_id: f"{broker.host}:{broker.port}" for broker in found.brokers}
    for described in found.topics:
        if described.error_code:
            raise typed_error(described.error_code, f"topic {topic!r}")
        for info in described.partitions:
            if info.partition_index == partition:
                if info.leader_id not in brokers:
                    raise typed_error(info.error_code, f"{topic}-{partition} has no leader")
                return brokers[info.leader_id]
    raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")


def open_transaction_at(leader: WireClient, topic: str, partition: int, start_offset: int) -> ActiveProducer:
    """The producer whose open transaction on the partition starts at `start_offset`, as DescribeProducers shows
    it; `InvalidTxnStateError` if none."""
    request = {"topics": [{"name": topic, "partition_indexes": [partition]}]}
    described = leader.request(DESCRIBE_PRODUCERS_KEY, 0, request).topics[0].partitions[0]
    if described.error_code:
        raise typed_error(described.error_code, f"cannot describe the producers of {topic}-{partition}")
    producers = [
        ActiveProducer(
            found.producer_id,
            found.producer_epoch,
            found.last_sequence,
            found.last_timestamp,
            found.coordinator_epoch,
            found.current_txn_start_offset,
        )
        for found in described.active_producers
    ]
    for producer in producers:
        if producer.current_txn_start_offset == start_offset:
            return producer
    opened = sorted(found.current_txn_start_offset for found in producers if found.current_txn_start_offset != NO_TXN)
    raise InvalidTxnStateError(
        f"no open transaction of {topic}-{partition} starts at offset {start_offset}; open ones start at "
        f"{', '.join(map(str, opened)) or 'none'}"
    )
