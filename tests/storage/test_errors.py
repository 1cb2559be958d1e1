"""Tests for `storage.errors`: fields survive pickling (Ray ships errors between processes) and show in str()."""

from __future__ import annotations

import copy
import inspect
import pickle
from pathlib import Path

import pytest

from storage import errors
from storage.errors import (
    BrokerError,
    CorruptRecordError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RaybrokerError,
    StorageError,
)

ERROR_TYPES = sorted(
    (value for value in vars(errors).values() if inspect.isclass(value) and issubclass(value, RaybrokerError)),
    key=lambda cls: cls.__name__,
)


def test_the_hierarchy_is_found() -> None:
    assert {CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError, InvalidConfigError} <= set(ERROR_TYPES)


@pytest.mark.parametrize("error_type", ERROR_TYPES, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"path": "/logs/t-0/00000000000000000000.log", "position": 4096, "offset": 17},
        {"path": Path("/logs/t-0/00000000000000000042.index")},
        {"position": 0},
        {"offset": 0},
        {"offset": -1, "position": 2**40},
    ],
)
def test_pickle_round_trip_keeps_fields(error_type: type[RaybrokerError], fields: dict[str, object]) -> None:
    error = error_type("something broke", **fields)  # type: ignore[arg-type]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        clone = pickle.loads(pickle.dumps(error, protocol=protocol))
        assert type(clone) is error_type
        assert (clone.message, clone.path, clone.position, clone.offset) == (
            error.message,
            error.path,
            error.position,
            error.offset,
        )
        assert str(clone) == str(error)
        assert clone.args == error.args
    for clone in (copy.copy(error), copy.deepcopy(error)):
        assert type(clone) is error_type and str(clone) == str(error)


def test_pickling_an_error_raised_from_another_keeps_it_raisable() -> None:
    try:
        try:
            raise ValueError("bad byte")
        except ValueError as exc:
            raise CorruptRecordError("bad batch", path="/x.log", position=3) from exc
    except CorruptRecordError as error:
        clone = pickle.loads(pickle.dumps(error))
    with pytest.raises(CorruptRecordError, match="bad batch") as info:
        raise clone
    assert info.value.position == 3


def test_str_includes_the_fields() -> None:
    error = CorruptRecordError("record batch CRC mismatch", path="/logs/t-0/0.log", position=4096, offset=17)
    assert str(error) == "record batch CRC mismatch (file /logs/t-0/0.log, position 4096, offset 17)"
    assert error.message == "record batch CRC mismatch"


def test_str_of_a_bare_message_is_the_message() -> None:
    assert str(OffsetOutOfRangeError("offset 5 is out of range")) == "offset 5 is out of range"


def test_zero_fields_are_shown() -> None:
    assert str(InvalidRecordError("x", position=0, offset=0)) == "x (position 0, offset 0)"


def test_path_objects_are_stored_as_strings() -> None:
    error = StorageError("x", path=Path("/a/b.log"))
    assert error.path == "/a/b.log"
    assert "file /a/b.log" in str(error)


def test_fields_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        StorageError("x", "/a/b.log")  # type: ignore[misc]


@pytest.mark.parametrize("error_type", ERROR_TYPES, ids=lambda cls: cls.__name__)
def test_every_error_is_a_raybroker_error_and_storage_errors_are_storage_errors(
    error_type: type[RaybrokerError],
) -> None:
    assert issubclass(error_type, Exception)
    assert error_type.__doc__
    if error_type not in (RaybrokerError, InvalidConfigError, InvalidRequestError, BrokerError):
        assert issubclass(error_type, StorageError | BrokerError)


def test_config_errors_are_not_storage_errors() -> None:
    # A bad setting is the caller's mistake, not a fault of the log: catching StorageError must not hide it.
    assert not issubclass(InvalidConfigError, StorageError)
    assert not issubclass(InvalidRequestError, StorageError)
