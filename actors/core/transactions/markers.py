"""The transaction coordinator's seam to the partitions' leaders: COMMIT/ABORT markers (Kafka's WriteTxnMarkers).

Kafka's coordinator sends one WriteTxnMarkers request per broker holding a transaction's partitions, to every such
broker at once, so a transaction's completion costs one round trip however many partitions it wrote. `write_markers`
is that call: every partition's marker is under way before the first answer is waited for. `write_marker` is the
one-partition form (Admin's `abortTransaction`, a WriteTxnMarkers request from a client). A marker is one value,
`TransactionMarker`, from the coordinator (or a client's request) through these seams, the append channel's frames
and the route to the partition's leader, where it is written.

A marker on a `__consumer_offsets` partition also completes the producer's transactional offsets in the group
coordinator (Kafka's `GroupCoordinator.onTransactionCompleted`): `OffsetsCompletingMarkers` decides that once, over
whichever host's marker writer (the partition actors on Ray, the in-process broker's replicas).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC
from storage.errors import RaybrokerError
from storage.records.layout import ControlRecordType
from storage.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class TransactionMarker:
    """A COMMIT/ABORT marker for one producer's transaction, as Kafka's WriteTxnMarkers carries it: the same on every
    partition it is written to. A partition refuses it when `producer_epoch` is older than its producer's
    (`InvalidProducerEpochError`) or `coordinator_epoch` older than that of the producer's last marker
    (`TransactionCoordinatorFencedError`: a stale coordinator)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: ControlRecordType

    @property
    def commit(self) -> bool:
        return self.result == ControlRecordType.COMMIT


class TransactionMarkers(Protocol):
    """Writes COMMIT/ABORT markers on partitions' leaders; see the module docstring."""

    def write_markers(
        self, partitions: Collection[TopicPartition], marker: TransactionMarker
    ) -> dict[TopicPartition, RaybrokerError]:
        """Writes `marker` on each partition, all at once, each answered once every in-sync replica has it (Kafka
        appends markers with acks -1). Returns the partitions whose marker was not written, each with its typed
        error (`InvalidProducerEpochError`, `TransactionCoordinatorFencedError`, `UnknownTopicOrPartitionError`,
        `BrokerNotAvailableError`...); the others have theirs."""
        ...


class OffsetsCompletingMarkers:
    """`markers`, plus what a marker on `__consumer_offsets` means to the group coordinator: once the marker of
    partition P is written, `complete(P, producer_id, commit)` makes the producer's pending transactional offsets of
    P's groups committed or drops them. A completion that fails counts as the marker's failure, so the coordinator
    writes both again later (a second marker of the same transaction is harmless; the completion then finds the
    offsets it left)."""

    def __init__(self, markers: TransactionMarkers, complete: Callable[[int, int, bool], None]) -> None:
        self._markers = markers
        self._complete = complete

    def write_markers(
        self, partitions: Collection[TopicPartition], marker: TransactionMarker
    ) -> dict[TopicPartition, RaybrokerError]:
        failed = self._markers.write_markers(partitions, marker)
        for topic, partition in partitions:
            if topic == CONSUMER_OFFSETS_TOPIC and (topic, partition) not in failed:
                try:
                    self._complete(partition, marker.producer_id, marker.commit)
                except RaybrokerError as exc:
                    failed[(topic, partition)] = exc
        return failed


def write_marker(markers: TransactionMarkers, topic: str, partition: int, marker: TransactionMarker) -> None:
    """Writes one marker through `markers`, raising its typed error if it was not written."""
    failed = markers.write_markers([(topic, partition)], marker)
    if failed:
        raise failed[(topic, partition)]
