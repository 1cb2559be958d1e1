"""config_values: Kafka's Java-typed parsing, checking and printing of config values, shared by every config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from storage.config.config_values import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    JavaType,
    check_fields,
    check_value,
    config_field,
    config_from_properties,
    kafka_name,
    parse_value,
    render_properties,
    render_value,
    values_from_properties,
)
from storage.errors import InvalidConfigError


@dataclass(frozen=True)
class Sample:
    """A config with one key of every Java type, bounds, choices and an optional key."""

    sample_count: int = config_field(1, "int", "a count", low=0, high=10)
    sample_ms: int | None = config_field(None, "long", "optional")
    sample_ratio: float = config_field(0.5, "double", "a ratio")
    sample_enable: bool = config_field(True, "boolean")
    sample_mode: str = config_field("a", "string", choices=("a", "b"))
    sample_dirs: tuple[str, ...] = config_field(("/x",), "list")
    not_a_key: int = 0

    def __post_init__(self) -> None:
        check_fields(self)


@pytest.mark.parametrize(
    ("java_type", "text", "value"),
    [
        ("int", " 42 ", 42),
        ("int", "+7", 7),
        ("int", str(INT_MIN), INT_MIN),
        ("long", str(LONG_MAX), LONG_MAX),
        ("double", "0.25", 0.25),
        ("double", ".5", 0.5),
        ("double", "1e3", 1000.0),
        ("double", "-2", -2.0),
        ("boolean", "TRUE", True),
        ("boolean", " false ", False),
        ("string", " compact ", "compact"),
        ("list", " /a , ,/b ", ("/a", "/b")),
        ("list", "", ()),
    ],
)
def test_strings_parse_as_kafka_parses_them(java_type: JavaType, text: str, value: object) -> None:
    assert parse_value("k", text, java_type) == value


@pytest.mark.parametrize(
    ("java_type", "text", "expectation"),
    [
        ("int", "1_000", "expected an integer (Java int)"),
        ("int", "1.5", "expected an integer (Java int)"),
        ("long", "", "expected an integer (Java long)"),
        ("double", "inf", "expected a number"),
        ("double", "nan", "expected a number"),
        ("double", "half", "expected a number"),
        ("boolean", "yes", "expected true or false"),
        ("boolean", "1", "expected true or false"),
    ],
)
def test_unparsable_strings_name_key_value_and_expectation(java_type: JavaType, text: str, expectation: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        parse_value("some.key", text, java_type)
    assert f"invalid value {text!r} for some.key: {expectation}" in str(info.value)


def test_native_values_pass_parsing_and_lists_become_tuples() -> None:
    assert parse_value("k", 5, "int") == 5
    assert parse_value("k", ["/a", "/b"], "list") == ("/a", "/b")
    assert parse_value("k", None, "string") is None


@pytest.mark.parametrize(
    ("java_type", "value"),
    [
        ("int", INT_MAX + 1),
        ("int", INT_MIN - 1),
        ("long", LONG_MAX + 1),
        ("long", LONG_MIN - 1),
        ("int", True),
        ("int", 1.0),
        ("double", float("nan")),
        ("double", False),
        ("double", "0.5"),
        ("boolean", 1),
        ("string", 5),
        ("list", ["/a"]),
        ("list", ("/a", 1)),
    ],
)
def test_wrong_python_values_are_rejected(java_type: JavaType, value: object) -> None:
    with pytest.raises(InvalidConfigError, match=r"for some\.key"):
        check_value("some.key", value, java_type)


@pytest.mark.parametrize(
    ("java_type", "value"),
    [("int", INT_MAX), ("long", LONG_MIN), ("double", 1), ("double", float("inf")), ("list", ())],
)
def test_edge_values_are_accepted(java_type: JavaType, value: object) -> None:
    check_value("some.key", value, java_type)


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"sample_count": -1}, "-1 for sample.count: must be at least 0"),
        ({"sample_count": 11}, "11 for sample.count: must be at most 10"),
        ({"sample_mode": "c"}, "'c' for sample.mode: expected one of ['a', 'b']"),
        ({"sample_ms": "5"}, "'5' for sample.ms: expected an integer (Java long)"),
    ],
)
def test_check_fields_applies_type_bounds_and_choices(fields: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        Sample(**fields)
    assert fragment in str(info.value)


def test_render_prints_as_kafka_and_leaves_unset_optional_keys_out() -> None:
    assert (render_value(True), render_value(("/a", "/b")), render_value(1.5)) == ("true", "/a,/b", "1.5")
    assert render_properties(Sample()) == {
        "sample.count": "1",
        "sample.ratio": "0.5",
        "sample.enable": "true",
        "sample.mode": "a",
        "sample.dirs": "/x",
    }
    assert render_properties(Sample(sample_ms=7))["sample.ms"] == "7"


def test_values_from_properties_splits_known_and_other_keys() -> None:
    values, others = values_from_properties(
        Sample, {" sample.count ": "3", "not.a.key": "1", "sample_ratio": "0.1", "sample.dirs": "/a,/b"}
    )
    assert values == {"sample_count": 3, "sample_dirs": ("/a", "/b")}
    assert others == ["not.a.key", "sample_ratio"]


def test_config_from_properties_applies_over_a_base_and_rejects_unknown_keys() -> None:
    base = Sample(sample_count=4)
    config = config_from_properties(Sample, {"sample.enable": "false"}, base, "sample config")
    assert (config.sample_count, config.sample_enable) == (4, False)
    assert config_from_properties(Sample, {}, None, "sample config") == Sample()
    with pytest.raises(InvalidConfigError, match=r"unknown sample config 'sample\.cont'"):
        config_from_properties(Sample, {"sample.cont": "1"}, None, "sample config")


def test_properties_round_trip() -> None:
    config = Sample(sample_count=9, sample_ms=LONG_MAX, sample_ratio=0.125, sample_mode="b", sample_dirs=("/a", "/b"))
    assert config_from_properties(Sample, render_properties(config), None, "sample config") == config


def test_kafka_name_turns_underscores_into_dots() -> None:
    assert kafka_name("log_cleaner_io_buffer_size") == "log.cleaner.io.buffer.size"
