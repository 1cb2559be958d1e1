"""What an append fails with when its leader's process goes away, on a real append channel connection whose other end
is a bare socket (no Ray): sent and never answered, it may have been written, and fails as REQUEST_TIMED_OUT (which
Kafka's clients read as possibly written); refused unsent by a connection already broken, it fails as
LEADER_NOT_AVAILABLE (not written). The oracle is Kafka's client-side reading of the two codes: librdkafka's
`rd_kafka_err_action` marks REQUEST_TIMED_OUT "possibly persisted" and LEADER_NOT_AVAILABLE "not persisted"."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from actors.server.append_route import AppendRoute, PartitionLeader
from cluster.protocol.error_codes import error_code
from storage.errors import AnswerLostError, BrokerNotAvailableError, RequestTimedOutError
from tests.actors.channels.test_append_channel import TOPIC, connected_to_listener, now_records
from tests.storage.builders import batch_bytes


def test_an_append_sent_and_never_answered_fails_as_request_timed_out() -> None:
    route = AppendRoute()
    with connected_to_listener() as (connection, peer):
        leader = PartitionLeader(handle=None, replicated=False, channel=connection)
        waiting = route.send(leader, TOPIC, 0, batch_bytes(now_records(1)), 1)
        peer.close()
        with pytest.raises(RequestTimedOutError, match="may or may not be written") as lost:
            waiting.result()
        assert lost.value.retriable
        assert error_code(lost.value) == ErrorCode.request_timed_out

        refused = route.send(leader, TOPIC, 0, batch_bytes(now_records(1)), 1)
        with pytest.raises(BrokerNotAvailableError) as unsent:
            refused.result()
        assert error_code(unsent.value) == ErrorCode.leader_not_available
    route.close()


def test_an_awaited_append_never_answered_fails_as_request_timed_out() -> None:
    """The listener's path: the append awaited on an event loop."""
    route = AppendRoute()
    with connected_to_listener() as (connection, peer):
        leader = PartitionLeader(handle=None, replicated=False, channel=connection)

        async def append_then_lose_the_answer() -> None:
            waiting = route.send(leader, TOPIC, 0, batch_bytes(now_records(1)), 1)
            peer.close()
            await waiting.async_result()

        with pytest.raises(RequestTimedOutError):
            asyncio.run(append_then_lose_the_answer())
    route.close()


def test_a_lost_answer_outside_an_append_stays_leader_not_available() -> None:
    """A read or a lookup whose actor died wrote nothing: the listener answers it as any unavailable broker."""
    assert error_code(AnswerLostError("actor unavailable")) == ErrorCode.leader_not_available
