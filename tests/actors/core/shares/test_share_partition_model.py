"""Random histories of one share-partition against a per-offset model (hypothesis's rule-based state machine):
several members acquire (in either acquire mode), accept, release, reject, renew their locks, acknowledge offset by
offset (GAP and RENEW included) and acknowledge what they do not hold, locks expire on a mock clock, members leave,
records are deleted below SPSO, and the share-partition restarts from its written state. After every step the
share-partition's records equal the model's offset by offset, and KIP-932's promises hold:

- no offset is acquired by two members at once, and an accepted record is never acquired again (across restarts);
- a delivery count never exceeds `group.share.delivery.count.limit`, and a release or expiry at the limit archives;
- SPSO is the first offset not done and never moves back, and no more than the record lock limit (plus the rest of
  one log batch) is in flight;
- in the record-limit acquire mode, exactly the first `max_records` acquirable offsets are acquired;
- a refused acknowledgement changes nothing, and the log start offset moving past SPSO drops what lies below;
- when the members release what they hold and someone accepts everything, every offset below SPEO ends accepted or
  archived and SPSO reaches SPEO.

The model is the oracle: a dict of offset -> (state, delivery count, holder, lock deadline) updated by Kafka's rules
(`SharePartition` and `InFlightState.tryUpdateState`). Marked slow: a few hundred histories take several seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.core.shares.acknowledgements import AcknowledgementBatch, AcknowledgeType
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.share_partition import AcquiredRecords, RecordState, SharePartition
from storage.clock import MockClock
from storage.errors import InvalidRecordStateError, InvalidRequestError
from storage.records.share_group_state import ShareSnapshot

pytestmark = pytest.mark.slow

LOG_END = 150
# The log's batches: sizes 1..5 in turn, so a read's soft limit rounds up by up to four records.
LOG_BATCHES: list[tuple[int, int]] = []
_offset, _size = 0, 1
while _offset < LOG_END:
    LOG_BATCHES.append((_offset, min(_offset + _size, LOG_END) - 1))
    _offset += _size
    _size = _size % 5 + 1
CONFIG = ResolvedShareConfig(delivery_count_limit=3, max_record_locks=100, record_lock_duration_ms=15000)
MEMBERS = ("m1", "m2", "m3")
# What each acknowledge type makes of an acquired record in the model (KIP-932's table).
_STATES = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}


@dataclass
class _Offset:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int | None = None


def _read_from(offset: int) -> list[tuple[int, int]]:
    """The log batches a read from `offset` returns (every batch ending at or after it)."""
    return [batch for batch in LOG_BATCHES if batch[1] >= offset]


class SharePartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = MockClock()
        self.sp = SharePartition(self.clock, CONFIG)
        self.model: dict[int, _Offset] = {}
        self.accepted: set[int] = set()
        self.last_start = 0
        self.log_start = 0

    # --- the model's rules -----------------------------------------------------------------------------

    def _settle(self, offset: int, state: RecordState) -> None:
        record = self.model[offset]
        if state is RecordState.AVAILABLE and record.delivery_count >= CONFIG.delivery_count_limit:
            state = RecordState.ARCHIVED
        record.state, record.member_id, record.deadline_ms = state, None, None
        if state is RecordState.ACKNOWLEDGED:
            self.accepted.add(offset)

    def _apply(self, offset: int, ack_type: AcknowledgeType) -> None:
        """An acknowledgement of an offset the member holds: RENEW moves its lock deadline, the others settle it."""
        if ack_type is AcknowledgeType.RENEW:
            self.model[offset].deadline_ms = self.clock.milliseconds() + CONFIG.record_lock_duration_ms
        else:
            self._settle(offset, _STATES[ack_type])

    def _expire(self) -> None:
        now = self.clock.milliseconds()
        for offset, record in self.model.items():
            if record.deadline_ms is not None and record.deadline_ms <= now:
                self._settle(offset, RecordState.AVAILABLE)

    def _held_by(self, member: str) -> list[int]:
        return sorted(o for o, r in self.model.items() if r.state is RecordState.ACQUIRED and r.member_id == member)

    # --- rules ---------------------------------------------------------------------------------------------

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 30), record_limit=st.booleans())
    def acquire(self, member: str, max_records: int, record_limit: bool) -> None:
        self._expire()
        start, end = self.sp.start_offset, self.sp.end_offset
        acquired = self.sp.acquire(member, _read_from(self.sp.next_fetch_offset()), max_records, record_limit)
        if record_limit:
            self._check_record_limit(acquired, max_records, start, end)
        deadline = self.clock.milliseconds() + CONFIG.record_lock_duration_ms
        for batch in acquired:
            for offset in range(batch.first_offset, batch.last_offset + 1):
                assert offset not in self.accepted, f"accepted offset {offset} acquired again"
                record = self.model.setdefault(offset, _Offset(RecordState.AVAILABLE, 0))
                assert record.state is RecordState.AVAILABLE, f"offset {offset} acquired while {record.state}"
                record.state, record.member_id, record.deadline_ms = RecordState.ACQUIRED, member, deadline
                record.delivery_count += 1
                assert batch.delivery_count == record.delivery_count

    def _check_record_limit(self, acquired: list[AcquiredRecords], max_records: int, start: int, end: int) -> None:
        """The record-limit acquire mode (Kafka 4.2's `record_limit`): exactly the first `max_records` of the
        Available in-flight offsets, then of the new ones the record lock limit leaves room for; the rest of the log
        batch holding the last new one goes into flight Available, never delivered."""
        available = [o for o in sorted(self.model) if start <= o < end and self.model[o].state is RecordState.AVAILABLE]
        room = max(0, min(CONFIG.max_record_locks - (end - start), LOG_END - end))
        expected = (available + list(range(end, end + room)))[:max_records]
        got = [o for batch in acquired for o in range(batch.first_offset, batch.last_offset + 1)]
        assert got == expected, (got, expected)
        new = [o for o in expected if o >= end]
        if new:
            batch_end = next(last for first, last in LOG_BATCHES if first <= new[-1] <= last)
            for offset in range(new[-1] + 1, batch_end + 1):
                self.model[offset] = _Offset(RecordState.AVAILABLE, 0)
            assert self.sp.end_offset == batch_end + 1

    @rule(
        member=st.sampled_from(MEMBERS),
        ack_type=st.sampled_from(
            [AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT, AcknowledgeType.RENEW]
        ),
        data=st.data(),
    )
    def acknowledge_held(self, member: str, ack_type: AcknowledgeType, data: st.DataObject) -> None:
        self._expire()
        held = self._held_by(member)
        if not held:
            return
        first = data.draw(st.sampled_from(held))
        last = first
        while last + 1 in held and data.draw(st.booleans()):
            last += 1
        self.sp.acknowledge(member, [AcknowledgementBatch(first, last, (int(ack_type),))], renew=True)
        for offset in range(first, last + 1):
            self._apply(offset, ack_type)

    @rule(member=st.sampled_from(MEMBERS), first=st.integers(0, LOG_END), length=st.integers(1, 10))
    def acknowledge_anything(self, member: str, first: int, length: int) -> None:
        """An acknowledgement of any range: accepted only if every offset at or above SPSO is this member's."""
        self._expire()
        last = first + length - 1
        start, end = self.sp.start_offset, self.sp.end_offset
        mine = set(self._held_by(member))
        in_range = [o for o in range(max(first, start), last + 1)]
        before = self.sp.in_flight()
        try:
            self.sp.acknowledge(member, [AcknowledgementBatch(first, last, (int(AcknowledgeType.ACCEPT),))])
        except InvalidRequestError:
            assert end <= last and start <= last
            assert self.sp.in_flight() == before
            return
        except InvalidRecordStateError:
            assert not set(in_range) <= mine or start == end
            assert self.sp.in_flight() == before
            return
        assert set(in_range) <= mine
        for offset in in_range:
            self._settle(offset, RecordState.ACKNOWLEDGED)

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge_per_offset(self, member: str, data: st.DataObject) -> None:
        """One type per offset over a run of the member's records, GAP included (Kafka's per-offset path)."""
        self._expire()
        held = self._held_by(member)
        if not held:
            return
        first = data.draw(st.sampled_from(held))
        last = first
        while last + 1 in held and last - first < 6:
            last += 1
        size = last - first + 1
        types = data.draw(st.lists(st.sampled_from(list(AcknowledgeType)), min_size=size, max_size=size))
        self.sp.acknowledge(member, [AcknowledgementBatch(first, last, tuple(int(t) for t in types))], renew=True)
        for offset, ack_type in zip(range(first, last + 1), types, strict=True):
            self._apply(offset, ack_type)

    @rule(advance=st.integers(1, 20))
    def delete_records(self, advance: int) -> None:
        """The log start offset moves past SPSO: what lies below is never delivered again."""
        self._expire()
        self.log_start = max(self.log_start, self.sp.start_offset) + advance
        self.sp.update_log_start_offset(self.log_start)
        for offset, record in self.model.items():
            if offset < self.log_start and not record.state.terminal:
                record.state, record.member_id, record.deadline_ms = RecordState.ARCHIVED, None, None

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member: str) -> None:
        self._expire()
        self.sp.release_acquired_records(member)
        for offset in self._held_by(member):
            self._settle(offset, RecordState.AVAILABLE)

    @rule(duration_ms=st.sampled_from([1000, 7000, 15000]))
    def sleep(self, duration_ms: int) -> None:
        self.clock.sleep(duration_ms)
        self.sp.maybe_expire_locks()
        self._expire()

    @precondition(lambda self: bool(self.model))
    @rule()
    def restart(self) -> None:
        written = ShareSnapshot.from_bytes(ShareSnapshot(self.sp.state()).to_bytes()).state
        self.sp = SharePartition(self.clock, CONFIG, state=written, log_end_offset=LOG_END)
        for record in self.model.values():
            if record.state is RecordState.ACQUIRED:
                record.state, record.member_id, record.deadline_ms = RecordState.AVAILABLE, None, None
                record.delivery_count -= 1
        # The last records never delivered before are not written: read again from the log as new ones.
        for offset in sorted(self.model, reverse=True):
            if (self.model[offset].state, self.model[offset].delivery_count) != (RecordState.AVAILABLE, 0):
                break
            del self.model[offset]

    # --- invariants ----------------------------------------------------------------------------------------

    @invariant()
    def matches_the_model(self) -> None:
        start, end = self.sp.start_offset, self.sp.end_offset
        assert start >= self.last_start, "SPSO moved back"
        self.last_start = start
        seen: dict[int, tuple[RecordState, int, str | None]] = {}
        for run in self.sp.in_flight():
            for offset in range(run.first_offset, run.last_offset + 1):
                seen[offset] = (run.state, run.delivery_count, run.member_id)
                assert run.delivery_count <= CONFIG.delivery_count_limit
        expected = {o: (r.state, r.delivery_count, r.member_id) for o, r in self.model.items() if start <= o < end}
        assert seen == expected
        first_open = min((o for o, r in self.model.items() if not r.state.terminal), default=end)
        assert start == min(first_open, end)
        assert all(r.state.terminal for o, r in self.model.items() if o < start)
        assert end - start <= CONFIG.max_record_locks + 4

    def teardown(self) -> None:
        """Every member leaves; one consumer acquires and accepts until everything read is done (after a restart the
        in-flight range may end inside a log batch, so the last batch read may take the rest of it)."""
        end = self.sp.end_offset
        for member in MEMBERS:
            self.sp.release_acquired_records(member)
        for _ in range(CONFIG.delivery_count_limit * LOG_END):
            batches = [b for b in _read_from(self.sp.next_fetch_offset()) if b[0] < end]
            acquired = self.sp.acquire("drain", batches, LOG_END)
            if not acquired:
                break
            self.sp.acknowledge("drain", [AcknowledgementBatch(a.first_offset, a.last_offset, (1,)) for a in acquired])
        assert self.sp.start_offset == self.sp.end_offset >= end
        assert self.sp.in_flight() == ()


SharePartitionMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestSharePartitionModel = SharePartitionMachine.TestCase
