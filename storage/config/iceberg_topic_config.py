"""raybroker's own topic configs for topics kept as Iceberg tables (issue 48), beside Kafka's in `LogConfig`.

| key                      | type   | default | meaning                                                            |
|--------------------------|--------|---------|--------------------------------------------------------------------|
| iceberg.mode             | string | off     | `off`, or how records become rows: `key_value` (the record's       |
|                          |        |         | columns, key and value as bytes); `value_json` / `value_msgpack`   |
|                          |        |         | (the value, JSON or msgpack, parsed into `iceberg.value.schema`'s  |
|                          |        |         | columns, beside partition, offset and timestamp)                   |
| iceberg.table            | string | ""      | `namespace.table`; empty: `raybroker.<topic>`                      |
| iceberg.target.lag.ms    | long   | 60000   | how far behind the log the table may fall: translation runs at     |
|                          |        |         | least this often                                                   |
| iceberg.partition.spec   | string | ""      | the table's partitioning, Iceberg's transforms on its columns, a   |
|                          |        |         | comma list: `day(timestamp)`, `partition`, `bucket(16, key)`, ...  |
| iceberg.value.schema     | string | ""      | the value's columns for the value modes (not read by `key_value`): |
|                          |        |         | `storage.config.iceberg_value_schema`                              |

The syntax of `iceberg.partition.spec`, each term one of (N > 0):

    COLUMN | identity(COLUMN) | year(COLUMN) | month(COLUMN) | day(COLUMN) | hour(COLUMN)
    | bucket(N, COLUMN) | truncate(N, COLUMN)

With `key_value`, COLUMN is one of `KEY_VALUE_COLUMNS`, time transforms only on `timestamp` (the one timestamp
column) and `truncate` only on `key`, `value`, `partition` or `offset`, as Iceberg allows each transform only on some
types. In the value modes COLUMN is `partition`, `offset`, `timestamp` or a column of the value, each taking the
transforms its type takes in Iceberg (`_TRANSFORMS_BY_TYPE`). Everything is checked here, when the config is set
(CreateTopics, AlterConfigs, the Python Admin, `raybroker topics`), so that a bad value is refused with Kafka's
INVALID_CONFIG and the reason, never found later by the translator. This module knows nothing of Iceberg's library:
`cluster.iceberg` turns the parsed terms into an Iceberg partition spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from storage.config.iceberg_value_schema import ValueColumn, parse_value_schema
from storage.errors import InvalidConfigError

ICEBERG_MODES = ("off", "key_value", "value_json", "value_msgpack")
VALUE_MODES = ("value_json", "value_msgpack")
DEFAULT_NAMESPACE = "raybroker"
# The table's columns in `key_value` mode, in order, and the transforms each may take.
KEY_VALUE_COLUMNS = ("partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")
TIME_TRANSFORMS = ("year", "month", "day", "hour")
_TRANSFORMS_BY_COLUMN = {
    "partition": ("identity", "bucket", "truncate"),
    "offset": ("identity", "bucket", "truncate"),
    "timestamp": ("identity", "bucket", *TIME_TRANSFORMS),
    "timestamp_type": ("identity", "bucket"),
    "key": ("identity", "bucket", "truncate"),
    "value": ("identity", "bucket", "truncate"),
}
# Iceberg's transforms by source type (its spec's "Partition Transforms" table), for the value modes' columns.
_TRANSFORMS_BY_TYPE = {
    "boolean": ("identity",),
    "int": ("identity", "bucket", "truncate"),
    "long": ("identity", "bucket", "truncate"),
    "float": ("identity",),
    "double": ("identity",),
    "string": ("identity", "bucket", "truncate"),
    "binary": ("identity", "bucket", "truncate"),
    "date": ("identity", "bucket", "year", "month", "day"),
    "timestamp": ("identity", "bucket", *TIME_TRANSFORMS),
    "timestamptz": ("identity", "bucket", *TIME_TRANSFORMS),
}
_TERM = re.compile(
    r"^(?:(?P<transform>[a-z]+)\(\s*(?:(?P<width>[0-9]+)\s*,\s*)?(?P<arg>[A-Za-z_]\w*)\s*\)|(?P<bare>[A-Za-z_]\w*))$"
)
_NAME_PART = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True)
class PartitionTerm:
    """One term of `iceberg.partition.spec`: an Iceberg transform (`identity`, `day`, `bucket`, ...), the column it
    reads, and the bucket count or truncation width (0 for the transforms that take none)."""

    transform: str
    column: str
    width: int = 0


def parse_partition_spec(text: str, value_columns: tuple[ValueColumn, ...] | None = None) -> tuple[PartitionTerm, ...]:
    """The terms of an `iceberg.partition.spec` value (see the module docstring) over `key_value`'s columns, or with
    `value_columns` over a value mode's; raises `InvalidConfigError` naming the term that does not parse or that
    Iceberg would not take."""
    transforms_by_column = _TRANSFORMS_BY_COLUMN if value_columns is None else _value_mode_transforms(value_columns)
    terms: list[PartitionTerm] = []
    for raw in _split_terms(text):
        match = _TERM.match(raw)
        if match is None:
            raise _spec_error(text, f"{raw!r} is not COLUMN, transform(COLUMN) or transform(N, COLUMN)")
        if match["bare"]:
            term = PartitionTerm("identity", match["bare"])
        else:
            term = PartitionTerm(match["transform"], match["arg"], int(match["width"] or 0))
        takes_width = term.transform in ("bucket", "truncate")
        if takes_width != bool(match["width"]) or (takes_width and term.width <= 0):
            raise _spec_error(text, f"{raw!r}: bucket and truncate take (N > 0, COLUMN), other transforms (COLUMN)")
        allowed = transforms_by_column.get(term.column)
        if allowed is None:
            raise _spec_error(text, f"{raw!r}: no column {term.column!r} (columns: {', '.join(transforms_by_column)})")
        if term.transform not in allowed:
            raise _spec_error(text, f"{raw!r}: {term.column} takes only {', '.join(allowed)}")
        if any(other.column == term.column and other.transform == term.transform for other in terms):
            raise _spec_error(text, f"{raw!r} is given twice")
        terms.append(term)
    return tuple(terms)


def table_identifier(table: str, topic: str) -> tuple[str, str]:
    """(namespace, table name) of a topic's table: `iceberg.table` split at its last dot, or `raybroker.<topic>`."""
    if not table:
        return DEFAULT_NAMESPACE, topic
    namespace, _, name = table.rpartition(".")
    return namespace, name


def _value_mode_transforms(value_columns: tuple[ValueColumn, ...]) -> dict[str, tuple[str, ...]]:
    """Each column of a value mode's table and the transforms it takes."""
    own = {name: _TRANSFORMS_BY_COLUMN[name] for name in ("partition", "offset", "timestamp")}
    return {**own, **{column.name: _TRANSFORMS_BY_TYPE[column.type] for column in value_columns}}


def check_iceberg_keys(mode: str, table: str, partition_spec: str, value_schema: str = "") -> None:
    """Raises `InvalidConfigError` with the reason for a value of the iceberg keys that cannot be translated (the
    types, ranges and `choices` are `check_fields`' part). The value schema is checked in the value modes only
    (`key_value` does not read it)."""
    if table:
        namespace, _, name = table.rpartition(".")
        if not namespace or not all(_NAME_PART.match(part) for part in (*namespace.split("."), name)):
            raise InvalidConfigError(
                f"invalid value {table!r} for iceberg.table: expected namespace.table, each part letters, digits, "
                "'_' or '-'"
            )
    parse_partition_spec(partition_spec, parse_value_schema(value_schema) if mode in VALUE_MODES else None)


def _split_terms(text: str) -> list[str]:
    """The spec's terms: split at the commas outside parentheses, blanks trimmed; an empty spec has none."""
    terms: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    terms.append(current.strip())
    if terms == [""]:
        return []
    return terms


def _spec_error(text: str, reason: str) -> InvalidConfigError:
    return InvalidConfigError(f"invalid value {text!r} for iceberg.partition.spec: {reason}")
