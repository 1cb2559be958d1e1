"""Fitting one version-independent answer to the kio response class of the version a client asked for.

Kafka's messages change field by field from version to version (Fetch v4 has no `log_start_offset`, Metadata
v1 has no `cluster_id`, ...), and kio generates one frozen dataclass per version. Handlers therefore describe
their answer once, as plain values (nested dicts and lists, ints in Kafka's units), and `build` keeps what the
target version has, drops what it lacks, fills what the handler left out with the schema's default, and converts
Kafka's wire units to kio's Python types on the way:

| Kafka type              | handler gives       | kio field gets                                      |
|-------------------------|---------------------|-----------------------------------------------------|
| `error_code`            | int or `ErrorCode`  | `ErrorCode`                                         |
| `timedelta_i32/_i64`    | int milliseconds    | `datetime.timedelta`                                |
| `datetime_i64`          | int ms since epoch  | aware `datetime`, or None for -1 when nullable      |
| a struct / struct array | dict / list of dict | the version's nested dataclass(es), built likewise  |

A field the target version requires but the handler did not give is a bug in the handler: `build` raises
`TypeError` (the dataclass's own complaint) rather than inventing a value.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

_Entity = TypeVar("_Entity")
# Exact to the millisecond, unlike `datetime.fromtimestamp(ms / 1000)`, which goes through a float.
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    """How to convert one field's plain value: its Kafka type and, for structs, the nested class."""

    name: str
    kafka_type: str | None
    nested: type[Any] | None
    is_array: bool
    nullable: bool


_PLANS: dict[type[Any], tuple[_FieldPlan, ...]] = {}


def _plan(entity_type: type[Any]) -> tuple[_FieldPlan, ...]:
    """The conversion plan of a kio class, from its resolved annotations (computed once per class)."""
    plan = _PLANS.get(entity_type)
    if plan is None:
        plan = _PLANS[entity_type] = _make_plan(entity_type)
    return plan


def _make_plan(entity_type: type[Any]) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(entity_type)
    plans = []
    for field in dataclasses.fields(entity_type):
        annotation = hints[field.name]
        nullable = False
        if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
            members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            nullable = len(members) < len(typing.get_args(annotation))
            annotation = members[0]
        is_array = typing.get_origin(annotation) is tuple
        item = typing.get_args(annotation)[0] if is_array else annotation
        nested = item if dataclasses.is_dataclass(item) and isinstance(item, type) else None
        plans.append(_FieldPlan(field.name, field.metadata.get("kafka_type"), nested, is_array, nullable))
    return tuple(plans)


def build(entity_type: type[_Entity], values: Mapping[str, Any]) -> _Entity:
    """An instance of the kio class `entity_type` from `values` (see the module docstring)."""
    arguments: dict[str, Any] = {}
    for plan in _plan(entity_type):
        if plan.name in values:
            arguments[plan.name] = _convert(plan, values[plan.name])
    return entity_type(**arguments)


def _convert(plan: _FieldPlan, value: Any) -> Any:
    if value is None:
        return None
    if plan.nested is not None:
        nested = plan.nested
        return tuple(build(nested, item) for item in value) if plan.is_array else build(nested, value)
    if plan.is_array:
        return tuple(value)
    if plan.kafka_type == "error_code":
        return ErrorCode(int(value))
    if plan.kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=value)
    if plan.kafka_type == "datetime_i64":
        if value < 0 and plan.nullable:
            return None
        return _EPOCH + datetime.timedelta(milliseconds=value)
    return value


def milliseconds(delta: datetime.timedelta) -> int:
    """A kio duration field (`max_wait`, `timeout`) back in Kafka's integer milliseconds."""
    return round(delta.total_seconds() * 1000)
