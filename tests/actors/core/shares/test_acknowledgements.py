"""`acknowledgement_batches`: a consumer's acknowledgements (offset -> type) written as the fewest batches that
`validate_batches` accepts and that give back, offset by offset, the types they were made from; RENEW taken only from
a request that renews."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.core.shares.acknowledgements import (
    AcknowledgementBatch,
    AcknowledgeType,
    acknowledgement_batches,
    records_by_type,
    validate_batches,
)
from storage.errors import InvalidRequestError

ACKNOWLEDGEMENTS = st.dictionaries(st.integers(0, 60), st.sampled_from(list(AcknowledgeType)), max_size=40)


def test_runs_of_one_type_are_one_batch_and_mixed_runs_name_each_offset() -> None:
    accept, release, gap = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.GAP
    types = {4: accept, 5: accept, 6: accept, 9: release, 10: gap, 12: accept}
    assert acknowledgement_batches(types) == [
        AcknowledgementBatch(4, 6, (1,)),
        AcknowledgementBatch(9, 10, (2, 0)),
        AcknowledgementBatch(12, 12, (1,)),
    ]
    assert acknowledgement_batches({}) == []


@given(ACKNOWLEDGEMENTS)
def test_batches_are_valid_the_fewest_and_give_back_every_type(types: dict[int, AcknowledgeType]) -> None:
    batches = acknowledgement_batches(types)
    validate_batches(batches, renew=True)
    given_back = {
        offset: batch.type_at(offset)
        for batch in batches
        for offset in range(batch.first_offset, batch.last_offset + 1)
    }
    assert given_back == types
    # The fewest: a batch per run of consecutive offsets, one type when the run's types agree.
    assert all(later.first_offset > earlier.last_offset + 1 for earlier, later in itertools.pairwise(batches))
    assert all(len(batch.acknowledge_types) == 1 or len(set(batch.acknowledge_types)) > 1 for batch in batches)


def test_records_are_counted_by_type_and_gaps_are_not() -> None:
    accept, release, reject, gap = (
        int(t) for t in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT, AcknowledgeType.GAP)
    )
    batches = [
        AcknowledgementBatch(0, 9, (accept,)),
        AcknowledgementBatch(10, 13, (release, gap, reject, accept)),
        AcknowledgementBatch(14, 16, (gap,)),
    ]
    assert records_by_type(batches) == {"Accept": 11, "Release": 1, "Reject": 1}
    assert records_by_type([]) == {}


@pytest.mark.parametrize("types", [(4,), (1, 4)])
def test_renew_is_taken_only_from_a_request_that_says_it_renews(types: tuple[int, ...]) -> None:
    """Kafka's `validateAcknowledgementBatches`: type 4 (RENEW) only with `IsRenewAck`; elsewhere it is an invalid
    type, as any type past the known ones always is."""
    batch = AcknowledgementBatch(0, len(types) - 1, types)
    with pytest.raises(InvalidRequestError, match="invalid acknowledge type 4"):
        validate_batches([batch])
    validate_batches([batch], renew=True)
    with pytest.raises(InvalidRequestError, match="invalid acknowledge type 5"):
        validate_batches([AcknowledgementBatch(0, 0, (5,))], renew=True)
