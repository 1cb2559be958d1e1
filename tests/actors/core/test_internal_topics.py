"""`internal_batches`, how a coordinator replays a partition of its internal topic: from the log start to the log
end, and not before the leader's high watermark reached the log end (a leader just elected learns that its
predecessor's last states are replicated only once its followers fetch)."""

from __future__ import annotations

import pytest

from actors.core.internal_topics import internal_batches
from storage.errors import CoordinatorLoadInProgressError
from storage.records.record_batch import RecordBatchBuilder


class _Partition:
    """A leader holding `values`, one batch each, whose high watermark is `high_watermark`; `read` stops there."""

    def __init__(self, values: list[bytes], high_watermark: int) -> None:
        self._batches = []
        for offset, value in enumerate(values):
            builder = RecordBatchBuilder(base_offset=offset)
            builder.append(b"k", value, timestamp=1_700_000_000_000)
            self._batches.append(builder.build())
        self._high_watermark = high_watermark

    def offsets(self) -> tuple[int, int, int]:
        return 0, self._high_watermark, len(self._batches)

    def read(self, offset: int, max_bytes: int) -> bytes:
        return b"".join(self._batches[offset : self._high_watermark])


def test_a_partition_whose_high_watermark_reached_its_log_end_is_read_to_the_end() -> None:
    batches = internal_batches(_Partition([b"a", b"b", b"c"], 3), "__transaction_state-0", 1 << 20)
    assert [record.value for batch in batches for record in batch.records()] == [b"a", b"b", b"c"]


def test_a_leader_whose_high_watermark_is_below_its_log_end_is_not_loaded_yet() -> None:
    """The last state is on the leader (its predecessor acknowledged it) but above its high watermark: loading
    now would replay the state before it."""
    with pytest.raises(CoordinatorLoadInProgressError, match="high watermark 2 below the log end 3") as raised:
        list(internal_batches(_Partition([b"a", b"b", b"c"], 2), "__transaction_state-0", 1 << 20))
    assert raised.value.retriable
