"""`iceberg.value.schema`: the columns a record's value is parsed into in the value modes (`value_json`,
`value_msgpack`), given as an Iceberg schema in JSON or as a Spark DDL string, and checked when the config is set.

The two spellings (each column optional unless marked required):

    {"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"},
                                  {"id": 2, "name": "name", "required": false, "type": "string"}]}
    id BIGINT NOT NULL, name STRING

The column types, Iceberg's primitive types and the Spark SQL types that map to them:

| Iceberg     | Spark DDL                               | a JSON / msgpack value it takes                        |
|-------------|-----------------------------------------|--------------------------------------------------------|
| boolean     | BOOLEAN                                 | true / false                                           |
| int         | TINYINT, SMALLINT, INT, INTEGER         | an integer in -2^31 .. 2^31-1                          |
| long        | BIGINT, LONG                            | an integer in -2^63 .. 2^63-1                          |
| float       | FLOAT, REAL                             | a number                                               |
| double      | DOUBLE                                  | a number                                               |
| string      | STRING, VARCHAR(N), CHAR(N)             | a string                                               |
| binary      | BINARY                                  | msgpack bytes; in JSON a string (its UTF-8 bytes)      |
| date        | DATE                                    | `YYYY-MM-DD`                                           |
| timestamptz | TIMESTAMP                               | ISO 8601 text, or epoch milliseconds (Kafka's unit)    |
| timestamp   | TIMESTAMP_NTZ                           | the same, without a zone                               |

Nested types (struct, list, map) and decimals are refused for now, with that reason. The names `partition`,
`offset` and `timestamp` are the table's own columns beside the value's (the record's partition, offset and
timestamp), so a value column may not take them. What a value that does not fit does (a dead-letter row) is
`cluster.iceberg.value_table`'s part; this module knows nothing of Iceberg's library.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from storage.errors import InvalidConfigError

VALUE_TYPES = ("boolean", "int", "long", "float", "double", "string", "binary", "date", "timestamp", "timestamptz")
# The value modes' own columns, before the value's.
RECORD_COLUMNS = ("partition", "offset", "timestamp")
_SPARK_TYPES = {
    "boolean": "boolean",
    "tinyint": "int",
    "smallint": "int",
    "int": "int",
    "integer": "int",
    "bigint": "long",
    "long": "long",
    "float": "float",
    "real": "float",
    "double": "double",
    "string": "string",
    "binary": "binary",
    "date": "date",
    "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp",
}
_DDL_COLUMN = re.compile(
    r"^(?P<name>`[^`]+`|[A-Za-z_]\w*)\s+(?P<type>[A-Za-z_]+)(?P<size>\s*\(\s*\d+\s*\))?(?P<required>\s+NOT\s+NULL)?$",
    re.IGNORECASE,
)
_SIZED_TYPES = ("varchar", "char")
_UNSUPPORTED = "nested types (struct, list, map, array) and decimals are not supported yet"
# A column of a type this module refuses: its type word, or any `<` (the element types of a nested type).
_UNSUPPORTED_DDL = re.compile(r"^(?:`[^`]+`|\w+)\s+(?:array|map|struct|decimal|numeric|dec)\b|<", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ValueColumn:
    """One column of the value: its name, Iceberg primitive type (`VALUE_TYPES`) and whether a value must have it."""

    name: str
    type: str
    required: bool = False


def parse_value_schema(text: str) -> tuple[ValueColumn, ...]:
    """The columns of an `iceberg.value.schema` value (see the module docstring); `InvalidConfigError` with the
    reason for one that is empty, does not parse, or names a type or column it cannot take."""
    stripped = text.strip()
    if not stripped:
        raise _error(text, "the value modes need the value's columns")
    columns = _iceberg_columns(text, stripped) if stripped.startswith("{") else _ddl_columns(text, stripped)
    names: set[str] = set()
    for column in columns:
        if column.name in RECORD_COLUMNS:
            raise _error(text, f"{column.name!r} is the record's own column ({', '.join(RECORD_COLUMNS)})")
        if column.name in names:
            raise _error(text, f"{column.name!r} is given twice")
        names.add(column.name)
    return columns


def _iceberg_columns(text: str, stripped: str) -> tuple[ValueColumn, ...]:
    try:
        schema = json.loads(stripped)
    except ValueError as exc:
        raise _error(text, f"not JSON: {exc}") from None
    fields = schema.get("fields") if isinstance(schema, dict) and schema.get("type") == "struct" else None
    if not isinstance(fields, list) or not fields:
        raise _error(text, 'an Iceberg schema is {"type": "struct", "fields": [...]} with at least one field')
    columns = []
    for field in fields:
        if not isinstance(field, dict) or not isinstance(field.get("name"), str) or not field["name"]:
            raise _error(text, f"field {field!r} has no name")
        kind = field.get("type")
        if isinstance(kind, dict) or (isinstance(kind, str) and kind.startswith("decimal")):
            raise _error(text, f"field {field['name']!r}: {_UNSUPPORTED}")
        if not isinstance(kind, str) or kind not in VALUE_TYPES:
            raise _error(text, f"field {field['name']!r}: type {kind!r} is not one of {', '.join(VALUE_TYPES)}")
        required = field.get("required", False)
        if not isinstance(required, bool):
            raise _error(text, f"field {field['name']!r}: required must be true or false")
        columns.append(ValueColumn(field["name"], kind, required))
    return tuple(columns)


def _ddl_columns(text: str, stripped: str) -> tuple[ValueColumn, ...]:
    if any(_UNSUPPORTED_DDL.search(raw.strip()) for raw in stripped.split(",")):
        raise _error(text, _UNSUPPORTED)
    columns = []
    for raw in stripped.split(","):
        match = _DDL_COLUMN.match(raw.strip())
        if match is None:
            raise _error(text, f"{raw.strip()!r} is not `NAME TYPE [NOT NULL]`")
        spark_type = match["type"].lower()
        if (match["size"] is not None) != (spark_type in _SIZED_TYPES):
            raise _error(text, f"{raw.strip()!r}: only VARCHAR(N) and CHAR(N) take a size, and they need one")
        kind = "string" if spark_type in _SIZED_TYPES else _SPARK_TYPES.get(spark_type)
        if kind is None:
            known = ", ".join(name.upper() for name in (*_SPARK_TYPES, *_SIZED_TYPES))
            raise _error(text, f"{raw.strip()!r}: type {match['type']} is not one of {known}")
        columns.append(ValueColumn(match["name"].strip("`"), kind, match["required"] is not None))
    return tuple(columns)


def _error(text: str, reason: str) -> InvalidConfigError:
    return InvalidConfigError(f"invalid value {text!r} for iceberg.value.schema: {reason}")
