"""Kafka config values: how a key is named, parsed, checked and printed (Kafka's `ConfigDef` types).

Owns the rules shared by every config dataclass (`LogConfig`, `CleanerConfig`, `BrokerConfig`): a field is a
Kafka key with dots as underscores (`segment.bytes` -> `segment_bytes`), declared once with `config_field`, which
records its default, Java type and range. A key set that several configs hold (the cleaner's keys) is a dataclass
of its own that each of them extends, and `key_values` hands its values on. `check_fields` validates every such
field on creation, `values_from_properties` loads Kafka's dotted keys, `render_properties` prints them back as
Kafka would.

| Java type | Python value            | string form accepted (trimmed first)                    | range           |
|-----------|-------------------------|---------------------------------------------------------|-----------------|
| int       | int (not bool)          | optional sign and decimal digits                        | -2**31..2**31-1 |
| long      | int (not bool)          | optional sign and decimal digits                        | -2**63..2**63-1 |
| double    | int or float (not bool) | decimal digits, optional fraction and exponent          | any but NaN     |
| boolean   | bool                    | `true` / `false`, any case                              |                 |
| string    | str                     | anything                                                |                 |
| list      | tuple of str            | comma list, blanks trimmed, empty entries dropped (csv) |                 |
| password  | `Password`              | anything (kept as given, not trimmed)                   |                 |

A field may add `low`/`high` bounds and a set of `choices`. A field whose default is None is optional: None
passes every check and is left out when printing. Native (non-string) values pass parsing unchanged (a list
becomes a tuple for a `list` key) and are then checked like parsed ones. Every failure raises
`InvalidConfigError` naming the Kafka key, the value and what was expected, except for a password, whose value
no error, log line or printed config ever shows: `Password` prints as `[hidden]`, as Kafka's does.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from storage.arguments import is_int
from storage.errors import InvalidConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
# Java's Double.MAX_VALUE: Kafka's "no limit" for double settings (the cleaner's I/O throttle).
DOUBLE_MAX = sys.float_info.max

JavaType = Literal["int", "long", "double", "boolean", "string", "list", "password"]

_INTEGER_RANGES = {"int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX)}
# What Integer.parseInt / Long.parseLong accept; Python's int() would also take "1_000".
_JAVA_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_JAVA_DECIMAL = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_METADATA_KEY = "config_key"

ConfigT = TypeVar("ConfigT", bound="DataclassInstance")


@dataclass(frozen=True, slots=True)
class Password:
    """A secret setting (`ssl.key.password`): `value` is the secret; `str` and `repr` show `[hidden]`, so neither a
    printed config nor an error message can leak it."""

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__


@dataclass(frozen=True)
class ConfigKey:
    """One key's Java type, meaning and allowed values."""

    java_type: JavaType
    doc: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()


def config_field(
    default: Any,
    java_type: JavaType,
    doc: str = "",
    *,
    low: float | None = None,
    high: float | None = None,
    choices: tuple[Any, ...] = (),
) -> Any:
    """A dataclass field for one Kafka key (see the module docstring for the types)."""
    return field(default=default, metadata={_METADATA_KEY: ConfigKey(java_type, doc, low, high, choices)})


def config_key(spec: Field[Any]) -> ConfigKey:
    """The `ConfigKey` of a field made by `config_field`."""
    key: ConfigKey = spec.metadata[_METADATA_KEY]
    return key


def config_fields(config: Any) -> list[Field[Any]]:
    """The fields of a config dataclass (or instance) that are Kafka keys, in declaration order."""
    return [spec for spec in fields(config) if _METADATA_KEY in spec.metadata]


def key_values(config: Any, keys: type) -> dict[str, Any]:
    """The values `config` holds for the Kafka-key fields `keys` declares, by field name: what a config made of
    several key sets (`BrokerConfig`) hands to the config that checks one of them (`CleanerConfig(**values)`)."""
    return {spec.name: getattr(config, spec.name) for spec in config_fields(keys)}


def kafka_name(field_name: str) -> str:
    """`segment_bytes` -> `segment.bytes`."""
    return field_name.replace("_", ".")


def check_fields(config: Any) -> None:
    """Checks every Kafka-key field of `config`: type, `low`/`high` bounds and `choices`."""
    for spec in config_fields(config):
        value = getattr(config, spec.name)
        if value is None and spec.default is None:
            continue
        key = config_key(spec)
        name = kafka_name(spec.name)
        check_value(name, value, key.java_type)
        if key.low is not None and value < key.low:
            raise InvalidConfigError(f"invalid value {value!r} for {name}: must be at least {key.low}")
        if key.high is not None and value > key.high:
            raise InvalidConfigError(f"invalid value {value!r} for {name}: must be at most {key.high}")
        if key.choices and value not in key.choices:
            raise InvalidConfigError(f"invalid value {value!r} for {name}: expected one of {list(key.choices)}")


def check_value(name: str, value: Any, java_type: JavaType) -> None:
    """Raises `InvalidConfigError` unless `value` is a Python value of `java_type` (within its Java range)."""
    if java_type in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[java_type]
        if not is_int(value):
            raise InvalidConfigError(f"invalid value {value!r} for {name}: expected an integer (Java {java_type})")
        if not low <= value <= high:
            raise InvalidConfigError(f"invalid value {value!r} for {name}: expected a Java {java_type}, {low}..{high}")
    elif java_type == "double":
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise InvalidConfigError(f"invalid value {value!r} for {name}: expected a number")
    elif java_type == "boolean":
        if not isinstance(value, bool):
            raise InvalidConfigError(f"invalid value {value!r} for {name}: expected true or false")
    elif java_type == "string":
        if not isinstance(value, str):
            raise InvalidConfigError(f"invalid value {value!r} for {name}: expected a string")
    elif java_type == "password":
        if not isinstance(value, Password):
            raise InvalidConfigError(f"invalid value for {name}: expected a password")
    elif not isinstance(value, tuple) or not all(isinstance(item, str) for item in value):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected a tuple of strings")


def parse_value(key: str, raw: Any, java_type: JavaType) -> Any:
    """Kafka's `ConfigDef.parseType` for a string (trimmed first); other values pass through (lists to tuples)."""
    if java_type == "password":
        return Password(raw) if isinstance(raw, str) else raw
    if not isinstance(raw, str):
        return tuple(raw) if java_type == "list" and isinstance(raw, list | tuple) else raw
    text = raw.strip()
    if java_type in _INTEGER_RANGES:
        if not _JAVA_INTEGER.match(text):
            raise InvalidConfigError(f"invalid value {raw!r} for {key}: expected an integer (Java {java_type})")
        return int(text)
    if java_type == "double":
        if not _JAVA_DECIMAL.match(text):
            raise InvalidConfigError(f"invalid value {raw!r} for {key}: expected a number")
        return float(text)
    if java_type == "boolean":
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(f"invalid value {raw!r} for {key}: expected true or false")
        return text.lower() == "true"
    if java_type == "list":
        return tuple(item.strip() for item in text.split(",") if item.strip())
    return text


def render_value(value: Any) -> str:
    """A value as Kafka prints it: `true`/`false`, a comma list, or `str()`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def render_properties(config: Any) -> dict[str, str]:
    """Every set Kafka-key field of `config` under its Kafka name (unset optional keys are left out)."""
    rendered: dict[str, str] = {}
    for spec in config_fields(config):
        value = getattr(config, spec.name)
        if value is not None:
            rendered[kafka_name(spec.name)] = render_value(value)
    return rendered


def password_properties(config: Any) -> dict[str, Password]:
    """The set password keys of `config` under their Kafka names, as `Password`s: what `render_properties` hides,
    for a caller that hands the config on to another process (which parses a `Password` unchanged)."""
    return {
        kafka_name(spec.name): value
        for spec in config_fields(config)
        if config_key(spec).java_type == "password" and (value := getattr(config, spec.name)) is not None
    }


def values_from_properties(config_type: type, properties: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Field values for the dotted keys `config_type` declares (strings parsed), and the other keys, in order.

    Keys are trimmed; raises `InvalidConfigError` for a value its key's type cannot parse.
    """
    specs = {kafka_name(spec.name): spec for spec in config_fields(config_type)}
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for raw_key, raw in properties.items():
        key = str(raw_key).strip()
        spec = specs.get(key)
        if spec is None:
            unknown.append(key)
        else:
            values[spec.name] = parse_value(key, raw, config_key(spec).java_type)
    return values, unknown


def config_from_properties(
    config_type: type[ConfigT], properties: Mapping[str, Any], base: ConfigT | None, kind: str
) -> ConfigT:
    """`base` (or the defaults) with the dotted keys of `properties` applied; any other key raises.

    `kind` names the config in the error for an unknown key (`unknown topic config 'x'`).
    """
    values, unknown = values_from_properties(config_type, properties)
    if unknown:
        raise InvalidConfigError(f"unknown {kind} {unknown[0]!r}")
    return dataclasses.replace(base if base is not None else config_type(), **values)
