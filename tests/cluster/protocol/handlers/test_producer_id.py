"""InitProducerId: every request gets a fresh id with epoch 0, in every served version; transactions are refused."""

from __future__ import annotations

from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.handlers.producer_id import INIT_PRODUCER_ID_KEY, InitProducerIdHandler
from cluster.protocol.local_broker_view import LocalBrokerView
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from tests.cluster.protocol.helpers import request, run

VERSIONS = range(SERVED[INIT_PRODUCER_ID_KEY].min_version, SERVED[INIT_PRODUCER_ID_KEY].max_version + 1)


def init_producer_id(view: LocalBrokerView, version: int, transactional_id: str | None = None) -> Any:
    body = build(
        load_request_schema(INIT_PRODUCER_ID_KEY, version),
        {"transactional_id": transactional_id, "transaction_timeout": 60000, "producer_id": 5, "producer_epoch": 3},
    )
    response = run(InitProducerIdHandler(view)(request(body)))
    return decode_response(encode_response(1, response)[4:], load_response_schema(INIT_PRODUCER_ID_KEY, version))[1]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_request_gets_a_fresh_id_with_epoch_zero(view: LocalBrokerView, version: int) -> None:
    answers = [init_producer_id(view, version) for _ in range(3)]
    assert [(a.error_code, a.producer_id, a.producer_epoch) for a in answers] == [
        (ErrorCode.none, 0, 0),
        (ErrorCode.none, 1, 0),
        (ErrorCode.none, 2, 0),
    ]


def test_a_transactional_id_is_refused(view: LocalBrokerView) -> None:
    answer = init_producer_id(view, 4, transactional_id="txn-1")
    assert (answer.error_code, answer.producer_id) == (ErrorCode.invalid_request, -1)
