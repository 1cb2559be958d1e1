"""InitProducerId: every idempotent request gets a fresh id with epoch 0, in every served version; a transactional
id gets its coordinator's producer id and an epoch bumped by each request, PRODUCER_FENCED by version."""

from __future__ import annotations

from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.handlers.producer_id import INIT_PRODUCER_ID_KEY, InitProducerIdHandler
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.transaction_view import TransactionView
from tests.cluster.protocol.helpers import request, run

VERSIONS = range(SERVED[INIT_PRODUCER_ID_KEY].min_version, SERVED[INIT_PRODUCER_ID_KEY].max_version + 1)


def init_producer_id(
    view: InProcessBrokerView,
    version: int,
    transactional_id: str | None = None,
    producer: tuple[int, int] = (5, 3),
    timeout_ms: int = 60000,
) -> Any:
    body = build(
        load_request_schema(INIT_PRODUCER_ID_KEY, version),
        {
            "transactional_id": transactional_id,
            "transaction_timeout": timeout_ms,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
        },
    )
    response = run(InitProducerIdHandler(view, TransactionView.in_process(view.broker))(request(body)))
    return decode_response(encode_response(1, response)[4:], load_response_schema(INIT_PRODUCER_ID_KEY, version))[1]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_request_gets_a_fresh_id_with_epoch_zero(view: InProcessBrokerView, version: int) -> None:
    answers = [init_producer_id(view, version) for _ in range(3)]
    assert [(a.error_code, a.producer_id, a.producer_epoch) for a in answers] == [
        (ErrorCode.none, 0, 0),
        (ErrorCode.none, 1, 0),
        (ErrorCode.none, 2, 0),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_transactional_id_gets_its_producer_id_with_a_bumped_epoch_each_time(
    view: InProcessBrokerView, version: int
) -> None:
    first = init_producer_id(view, version, "txn-1", producer=(-1, -1))
    second = init_producer_id(view, version, "txn-1", producer=(-1, -1))
    assert (first.error_code, second.error_code) == (ErrorCode.none, ErrorCode.none)
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch + 1)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_a_stale_producer_naming_its_id_is_fenced_with_the_code_its_version_knows(
    view: InProcessBrokerView, version: int
) -> None:
    current = init_producer_id(view, version, "txn-1", producer=(-1, -1))
    stale = init_producer_id(view, version, "txn-1", producer=(current.producer_id + 100, 0))
    expected = ErrorCode.producer_fenced if version >= 4 else ErrorCode.invalid_producer_epoch
    assert (stale.error_code, stale.producer_id, stale.producer_epoch) == (expected, -1, -1)


@pytest.mark.parametrize("timeout_ms", [0, 900_001])
def test_a_transaction_timeout_out_of_range_is_invalid(view: InProcessBrokerView, timeout_ms: int) -> None:
    answer = init_producer_id(view, 4, "txn-1", producer=(-1, -1), timeout_ms=timeout_ms)
    assert (answer.error_code, answer.producer_id) == (ErrorCode.invalid_transaction_timeout, -1)
