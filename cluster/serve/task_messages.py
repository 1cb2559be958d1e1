"""The records of a Serve task queue on raybroker (Ray-free): a task as its queue topic holds it, and a task's
outcome as its results topic holds it, both JSON keyed by the task id, so any Kafka client can enqueue a task or read
an outcome, and nothing a producer wrote is ever evaluated or unpickled.

| record  | key     | value (a JSON object)                                                                   |
|---------|---------|-----------------------------------------------------------------------------------------|
| task    | task id | `task` (the handler's name), `args` (a list), `kwargs` (an object), `created_at` (s)     |
| outcome | task id | `status` (Celery's names: SUCCESS, FAILURE, REVOKED), `result`, `error`, `finished_at` (s) |

A task id unknown to the results topic is PENDING (as Celery answers for an id it holds no result of).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from storage.errors import RaybrokerError

PENDING = "PENDING"
SUCCESS = "SUCCESS"
FAILURE = "FAILURE"
REVOKED = "REVOKED"
# Outcomes after which a task is never run again.
FINAL_STATUSES = (SUCCESS, FAILURE, REVOKED)


class UnprocessableTaskError(RaybrokerError):
    """A queue record that is no task (no id, not JSON, missing or mistyped fields), or names no handler."""


@dataclass(frozen=True, slots=True)
class Task:
    """One task as the queue holds it."""

    task_id: str
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    created_at: float

    def value(self) -> bytes:
        """The record's value."""
        fields = {"task": self.name, "args": self.args, "kwargs": self.kwargs, "created_at": self.created_at}
        return json.dumps(fields, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a task, as the results topic holds it."""

    status: str
    result: Any = None
    error: str | None = None
    finished_at: float | None = None

    def value(self) -> bytes:
        """The record's value; `TypeError` if the result is no JSON value."""
        fields = {"status": self.status, "result": self.result, "error": self.error, "finished_at": self.finished_at}
        return json.dumps(fields, separators=(",", ":")).encode()


def task_of(key: bytes | None, value: bytes | None) -> Task:
    """The task a queue record holds; `UnprocessableTaskError` saying what is wrong if it holds none."""
    if not key:
        raise UnprocessableTaskError("the record has no key: a task's key is its id")
    try:
        task_id = key.decode()
        fields = json.loads(value) if value is not None else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UnprocessableTaskError(f"task record is not UTF-8 JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise UnprocessableTaskError("a task record's value must be a JSON object")
    name, args, kwargs = fields.get("task"), fields.get("args", []), fields.get("kwargs", {})
    created_at = fields.get("created_at", 0.0)
    if not isinstance(name, str) or not name:
        raise UnprocessableTaskError("a task record's `task` must be a non-empty string")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise UnprocessableTaskError("a task record's `args` must be a list and its `kwargs` an object")
    if not isinstance(created_at, int | float) or isinstance(created_at, bool):
        raise UnprocessableTaskError("a task record's `created_at` must be a number")
    return Task(task_id, name, args, kwargs, float(created_at))


def outcome_of(value: bytes | None) -> Outcome | None:
    """The outcome an results record holds; None for a record that holds none (a tombstone, or bytes some other
    writer put there), which leaves the task as it was."""
    if value is None:
        return None
    try:
        fields = json.loads(value)
    except ValueError:
        return None
    if not isinstance(fields, dict) or fields.get("status") not in FINAL_STATUSES:
        return None
    error = fields.get("error")
    finished_at = fields.get("finished_at")
    return Outcome(
        fields["status"],
        fields.get("result"),
        error if isinstance(error, str) else None,
        float(finished_at) if isinstance(finished_at, int | float) and not isinstance(finished_at, bool) else None,
    )
