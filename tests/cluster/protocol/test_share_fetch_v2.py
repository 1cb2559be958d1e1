"""What Kafka 4.2 added to ShareFetch and ShareAcknowledge (v2) over the wire, raybroker against Apache Kafka 4.2: the
acquire modes (KIP-1206, `share.acquire.mode`) and lock renewal (KIP-1222, RENEW), the same raw requests to the
partition's leader answered alike on both.

The sequence: two members join holding partition 0; member 1 fetches until a warm-up record is acquired (the
share-partition starts at the high watermark) and accepts it. Ten records are produced as one batch. Member 1 asks
for 3 in the record-limit mode: it gets exactly the first 3 (the batch's other 7 go into flight Available); member 2
asks for 4 in the record-limit mode and gets the next 4; member 1 asks for 2 in the batch-optimized mode and gets all
3 left (whole in-flight runs, a soft limit).

Renewal: member 1 acquires two more records and, 3 s into their 5 s lock, renews it (ShareAcknowledge with
`IsRenewAck` and RENEW); at 6 s member 2 still gets nothing (the lock runs from the renewal), and member 1 then
accepts both. Meanwhile: RENEW in a request that does not say it renews is INVALID_REQUEST for the partition; a
renewing ShareFetch whose fetch limits are not 0 is INVALID_REQUEST at the top level; one whose limits are 0 renews
and acquires nothing. Last, a ShareFetch with an acquire mode Kafka does not know: a top-level error (see the test),
nothing acquired, and the records produced next go to the member who asks after it. The offsets are compared
relative to the ten records' first."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.client import WireClient
from tests.cluster.protocol.helpers import GROUP_KEY, coordinator_client, topic_and_leader
from tests.cluster.protocol.test_share_group_wire import (
    ACCEPT,
    DEADLINE_S,
    Session,
    acquired,
    heartbeat,
    join_holding_partition_0,
    one_partition_topic,
    partition_codes,
)

pytestmark = pytest.mark.kafka

BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1
RENEW = 4
RENEWING_FETCH = {"is_renew_ack": True, "max_bytes": 0, "min_bytes": 0, "max_records": 0, "max_wait": 0}


def fetch(session: Session, mode: int, max_records: int) -> Any:
    """A ShareFetch (v2) of the session in acquire mode `mode` for at most `max_records`."""
    return session.fetch(share_acquire_mode=mode, max_records=max_records)


def share_fetch_v2_steps(bootstrap: str) -> list[tuple[str, object]]:
    """The module docstring's sequence on one broker: each step's name and what its answer said."""
    topic, produce = one_partition_topic(bootstrap, "kip1206", linger_ms=200)
    group = f"modes-{uuid.uuid4().hex[:8]}"
    described, leader_address = topic_and_leader(bootstrap, topic)
    steps: list[tuple[str, object]] = []
    members = [uuid.uuid4().hex[:22] for _ in range(2)]
    with (
        coordinator_client(bootstrap, group, GROUP_KEY) as coordinator,
        WireClient(leader_address) as leader,
    ):
        join_holding_partition_0(coordinator, group, members, topic, time.monotonic() + DEADLINE_S)
        first, second = (Session(leader, group, m, described.topic_id) for m in members)
        assert first.fetch().error_code == ErrorCode.none
        assert second.fetch().error_code == ErrorCode.none
        deadline = time.monotonic() + DEADLINE_S
        while not (warm := acquired(first.fetch())):
            assert time.monotonic() < deadline, "no warm-up record acquired"
            produce(1)
        assert partition_codes(first.acknowledge([(warm[0][0], warm[-1][1], [ACCEPT])])) == [ErrorCode.none]
        start = warm[-1][1] + 1
        produce(10)

        def relative(response: Any) -> list[tuple[int, int, int]]:
            return [(f - start, last - start, count) for f, last, count in acquired(response)]

        deadline = time.monotonic() + DEADLINE_S
        while not (limited := relative(fetch(first, RECORD_LIMIT, 3))):
            assert time.monotonic() < deadline, "the ten records not acquired"
        steps.append(("record limit 3", limited))
        steps.append(("record limit 4, the other member", relative(fetch(second, RECORD_LIMIT, 4))))
        steps.append(("batch mode 2", relative(fetch(first, BATCH_OPTIMIZED, 2))))
        second_held = [(start + 3, start + 6, [ACCEPT])]
        steps.append(("the other member accepts", partition_codes(second.acknowledge(second_held))))
        first_held = [(start, start + 2, [ACCEPT]), (start + 7, start + 9, [ACCEPT])]
        steps.append(("member 1 accepts", partition_codes(first.acknowledge(first_held))))
        produce(2)
        deadline = time.monotonic() + DEADLINE_S
        while not (held := relative(first.fetch())):
            assert time.monotonic() < deadline, "the two records to renew not acquired"
        acquired_at = time.monotonic()
        steps.append(("to renew", held))
        renewed = [(start + held[0][0], start + held[-1][1], [RENEW])]
        steps.append(("RENEW without IsRenewAck", partition_codes(first.acknowledge(renewed))))
        steps.append(("renewing fetch with limits", first.fetch(is_renew_ack=True).error_code))
        time.sleep(max(0.0, acquired_at + 3 - time.monotonic()))
        steps.append(("renewed", partition_codes(first.acknowledge(renewed, renew=True))))
        renewing = first.fetch(renewed, **RENEWING_FETCH)
        steps.append(("renewing fetch", (renewing.error_code, partition_codes(renewing, "acknowledge_error_code"))))
        steps.append(("nothing acquired by it", relative(renewing)))
        time.sleep(max(0.0, acquired_at + 6 - time.monotonic()))
        steps.append(("past the first lock", relative(second.fetch())))
        steps.append(("holder accepts", partition_codes(first.acknowledge([(renewed[0][0], renewed[0][1], [ACCEPT])]))))
        # Last, as it leaves member 1's session apart on the two brokers (see the test).
        unknown = fetch(first, 7, 5)
        steps.append(("an unknown mode", (unknown.error_code, relative(unknown))))
        produce(2)
        deadline = time.monotonic() + DEADLINE_S
        while not (after := relative(fetch(second, RECORD_LIMIT, 5))):
            assert time.monotonic() < deadline, "the two records after the unknown mode not acquired"
        steps.append(("after the unknown mode", after))
        for member in members:
            heartbeat(coordinator, group, member, -1, None)
    return steps


def test_acquire_modes_and_renewals_answer_as_on_kafka(share_listener: str, kafka4: str) -> None:
    with ThreadPoolExecutor(2) as pool:
        kafka, raybroker = pool.map(share_fetch_v2_steps, [kafka4, share_listener])
    named, ours = dict(kafka), dict(raybroker)
    # An unknown acquire mode: Kafka 4.2.2 answers UNKNOWN_SERVER_ERROR (its ShareAcquireMode.forId throws) after the
    # request took the session's next epoch (and applied its acknowledgements); raybroker refuses it as the bad input
    # it is, INVALID_REQUEST, before the session moves. Neither acquires anything, and the records go on to others.
    assert named.pop("an unknown mode") == (ErrorCode.unknown_server_error, [])
    assert ours.pop("an unknown mode") == (ErrorCode.invalid_request, [])
    assert [named[step] for step in ("record limit 3", "record limit 4, the other member", "batch mode 2")] == [
        [(0, 2, 1)],
        [(3, 6, 1)],
        [(7, 9, 1)],
    ]
    assert named["past the first lock"] == []
    assert named["holder accepts"] == [ErrorCode.none]
    assert ours == named
