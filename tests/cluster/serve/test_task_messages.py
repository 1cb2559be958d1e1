"""A Serve task queue's records (`cluster.serve.task_messages`): a task and an outcome come back as written, and a
record that is no task is refused with what is wrong, never evaluated."""

from __future__ import annotations

import json

import pytest

from cluster.serve.task_messages import (
    FAILURE,
    REVOKED,
    SUCCESS,
    Outcome,
    Task,
    UnprocessableTaskError,
    outcome_of,
    task_of,
)


def test_a_task_and_an_outcome_come_back_as_written() -> None:
    task = Task("id-1", "square", [3, "x", None], {"pause": 0.5, "nested": {"a": [1]}}, 1795866013.5)
    assert task_of(b"id-1", task.value()) == task
    for outcome in (Outcome(SUCCESS, {"y": [1, 2]}, None, 12.0), Outcome(FAILURE, None, "ValueError: no", 13.0)):
        assert outcome_of(outcome.value()) == outcome
    assert outcome_of(Outcome(REVOKED).value()) == Outcome(REVOKED)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, b'{"task":"t"}', "has no key"),
        (b"id", b"\x80\x81", "not UTF-8 JSON"),
        (b"id", b"cos(1)", "not UTF-8 JSON"),
        (b"id", b"[1, 2]", "must be a JSON object"),
        (b"id", None, "must be a JSON object"),
        (b"id", b'{"args":[]}', "`task` must be a non-empty string"),
        (b"id", b'{"task":"t","args":{"a":1}}', "`args` must be a list"),
        (b"id", b'{"task":"t","kwargs":[1]}', "its `kwargs` an object"),
        (b"id", b'{"task":"t","created_at":true}', "`created_at` must be a number"),
    ],
)
def test_a_record_that_is_no_task_is_refused_with_its_reason(
    key: bytes | None, value: bytes | None, reason: str
) -> None:
    with pytest.raises(UnprocessableTaskError, match=reason.replace("(", r"\(")):
        task_of(key, value)


def test_an_outcome_record_of_another_writer_changes_nothing() -> None:
    for value in (None, b"not json", b"[1]", json.dumps({"status": "PENDING"}).encode(), b'{"status":"RUNNING"}'):
        assert outcome_of(value) is None
    assert outcome_of(b'{"status":"SUCCESS","error":7,"finished_at":"x"}') == Outcome(SUCCESS)
