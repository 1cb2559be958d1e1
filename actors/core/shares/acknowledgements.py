"""A share consumer's acknowledgements as ShareFetch (78) and ShareAcknowledge (79) carry them, and the checks Kafka
makes of them before any share-partition sees them (Kafka's `KafkaApis.validateAcknowledgementBatches`).

An acknowledgement batch names an offset range and either one acknowledge type for the whole range or one per
offset; `acknowledgement_batches` writes a consumer's acknowledgements as the fewest such batches. The types and the
record state each leads to (Kafka's `SharePartition.ACK_TYPE_TO_RECORD_STATE`):

| type    | id | record state                                                           |
|---------|----|------------------------------------------------------------------------|
| GAP     | 0  | Archived: the offset holds no record (compacted away, a control record) |
| ACCEPT  | 1  | Acknowledged: processed, never delivered again                         |
| RELEASE | 2  | Available: delivered again (Archived once the delivery count limit is reached) |
| REJECT  | 3  | Archived: unprocessable, never delivered again                         |
| RENEW   | 4  | Acquired still, its lock renewed for the group's lock duration (KIP-1222) |

GAP exists on the wire only: the client sends it for offsets inside an acquired range that held no record. RENEW
(Kafka 4.2) is taken only from a request that says it carries renewals (ShareFetch and ShareAcknowledge v2's
`IsRenewAck`); anywhere else it is an unknown type, as Kafka's `validateAcknowledgementBatches` refuses it.

A partition's batches are refused whole with INVALID_REQUEST (`InvalidRequestError`) when a batch's last offset is
below its first, a batch starts below the last offset of the one before it (overlapping or out of order), it names
no type, it names several types but not exactly one per offset, or a type is not one of those taken. A batch starting
at the last offset of the one before it passes, as Kafka's check lets it (`firstOffset < prevEndOffset`): that offset
is then acknowledged twice, which the share-partition refuses (INVALID_RECORD_STATE).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from storage.errors import InvalidRequestError


class AcknowledgeType(enum.IntEnum):
    """Kafka's acknowledge types, valued as on the wire."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    """One acknowledged offset range (inclusive) and its types: one for every offset, or one per offset in order
    (Kafka's `ShareAcknowledgementBatch`). Types are the wire's bytes, checked by `validate_batches`."""

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]

    def type_at(self, offset: int) -> AcknowledgeType:
        """The type acknowledged for `offset`, one of the batch's."""
        if len(self.acknowledge_types) == 1:
            return AcknowledgeType(self.acknowledge_types[0])
        return AcknowledgeType(self.acknowledge_types[offset - self.first_offset])


def validate_batches(batches: Sequence[AcknowledgementBatch], renew: bool = False) -> None:
    """Raises `InvalidRequestError` (Kafka's INVALID_REQUEST, with its reason) unless `batches` are well formed for
    one share-partition, RENEW among their types only with `renew` (see the module docstring)."""
    previous_last = -1
    for batch in batches:
        if batch.last_offset < batch.first_offset:
            raise InvalidRequestError(
                f"acknowledgement batch {batch.first_offset}-{batch.last_offset} ends before it starts"
            )
        if batch.first_offset < previous_last:
            raise InvalidRequestError(
                f"acknowledgement batch {batch.first_offset}-{batch.last_offset} overlaps or precedes the one before it"
            )
        previous_last = batch.last_offset
        types = batch.acknowledge_types
        if not types:
            raise InvalidRequestError(f"acknowledgement batch {batch.first_offset}-{batch.last_offset} names no type")
        if len(types) > 1 and len(types) != batch.last_offset - batch.first_offset + 1:
            raise InvalidRequestError(
                f"acknowledgement batch {batch.first_offset}-{batch.last_offset} has {len(types)} types: "
                "one for the batch or one per offset"
            )
        taken = AcknowledgeType._value2member_map_
        unknown = sorted({t for t in types if t not in taken or (t == AcknowledgeType.RENEW and not renew)})
        if unknown:
            raise InvalidRequestError(f"invalid acknowledge type {unknown[0]}")


def acknowledgement_batches(types: dict[int, AcknowledgeType]) -> list[AcknowledgementBatch]:
    """`types` (offset -> type) as the fewest acknowledgement batches: runs of consecutive offsets, each with one type
    for the run when all agree, else one per offset."""
    batches: list[AcknowledgementBatch] = []
    run: list[tuple[int, AcknowledgeType]] = []
    for offset in sorted(types):
        if run and offset != run[-1][0] + 1:
            batches.append(_batch(run))
            run = []
        run.append((offset, types[offset]))
    if run:
        batches.append(_batch(run))
    return batches


def _batch(run: list[tuple[int, AcknowledgeType]]) -> AcknowledgementBatch:
    kinds = tuple(int(kind) for _, kind in run)
    return AcknowledgementBatch(run[0][0], run[-1][0], kinds[:1] if len(set(kinds)) == 1 else kinds)


def records_by_type(batches: Sequence[AcknowledgementBatch]) -> dict[str, int]:
    """The records `batches` acknowledge, by type as Kafka's `RecordAcknowledgementsPerSec` tags them (`Accept`,
    `Release`, `Reject`); GAP offsets hold no record and are not counted, as Kafka counts only the client's types."""
    counts: dict[str, int] = {}
    for batch in batches:
        types = batch.acknowledge_types
        if len(types) == 1:
            ranges = [(types[0], batch.last_offset - batch.first_offset + 1)]
        else:
            ranges = [(kind, 1) for kind in types]
        for kind, records in ranges:
            if kind != AcknowledgeType.GAP:
                name = AcknowledgeType(kind).name.capitalize()
                counts[name] = counts.get(name, 0) + records
    return counts
