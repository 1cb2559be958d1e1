"""`actors.channels.append_frames`: requests and answers survive a round trip byte for byte, errors come back as the
exact `storage.errors` type with the same text, any other name is never looked up beyond that module, and bytes that do
not parse raise only `InvalidRequestError` (never `struct.error`, `IndexError` or `UnicodeDecodeError`)."""

from __future__ import annotations

import contextlib
import random
import struct
from pathlib import Path

import pytest

import storage.errors
from actors.channels.append_frames import (
    SIZE,
    SOCKET_REQUEST_MAX_BYTES,
    AppendRequest,
    CoordinatorRequest,
    MarkerRequest,
    decode_answer,
    decode_request,
    encode_answer,
    encode_coordinator_request,
    encode_error,
    encode_marker_request,
    encode_request,
    error_named,
)
from actors.core.transactions.markers import TransactionMarker
from actors.server.partition_log import PartitionLogActor
from storage.errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    InvalidRequestError,
    KafkaStorageError,
    RaybrokerError,
)
from storage.partition.log import LogAppendInfo
from storage.records.layout import ControlRecordType
from tests.storage.builders import batch_bytes, simple_records

ERROR_CLASSES = sorted(
    (value for value in vars(storage.errors).values() if isinstance(value, type) and issubclass(value, RaybrokerError)),
    key=lambda cls: cls.__name__,
)


def body_of(frame: bytes | list[bytes]) -> bytes:
    """The bytes after a frame's size field, checking that the size field counts exactly them."""
    data = b"".join(frame) if isinstance(frame, list) else frame
    (size,) = SIZE.unpack_from(data)
    assert size == len(data) - SIZE.size
    return data[SIZE.size :]


def error_body(name: bytes, message: bytes, *, name_size: int | None = None) -> bytes:
    """An error answer's body as the module docstring lays it out: kind 1, u16 name length, name, position and
    offset (-1: none), no path (u16 0xFFFF), message."""
    size = len(name) if name_size is None else name_size
    return b"\x01" + struct.pack(">H", size) + name + struct.pack(">qqH", -1, -1, 0xFFFF) + message


# --- requests ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "partition", "acks"),
    [("events", 0, 1), ("t", 2**31 - 1, -1), ("événements.ü-日本", 17, 0), ("x" * 249, 3, 1)],
)
def test_a_request_round_trips_with_its_batches_unchanged(topic: str, partition: int, acks: int) -> None:
    batches = batch_bytes(simple_records(3)) + batch_bytes(simple_records(2, tag=1))
    decoded = decode_request(body_of(encode_request(topic, partition, acks, batches)))
    assert decoded[:3] == (topic, partition, acks)
    assert bytes(decoded[3]) == batches


def test_a_request_without_batches_round_trips_with_empty_batches() -> None:
    topic, partition, acks, batches = decode_request(body_of(encode_request("events", 4, -1, b"")))
    assert (topic, partition, acks, bytes(batches)) == ("events", 4, -1, b"")


def test_a_request_is_sent_as_pieces_that_keep_the_callers_batches() -> None:
    batches = batch_bytes(simple_records(2))
    pieces = encode_request("events", 0, 1, batches)
    assert pieces[-1] is batches
    assert SIZE.unpack(pieces[0]) == (sum(map(len, pieces[1:])),)


MALFORMED_REQUESTS = {
    "empty": b"",
    "kind only": b"\x00",
    "topic length cut": b"\x00\x00",
    "topic longer than the body": b"\x00\x00\x20events" + struct.pack(">i", 0) + b"\x01",
    "partition cut": b"\x00\x00\x06events\x00\x00",
    "acks missing": b"\x00\x00\x06events" + struct.pack(">i", 0),
    "topic not UTF-8": b"\x00\x00\x02\xff\xfe" + struct.pack(">i", 0) + b"\x01",
    "unknown kind": b"\x07\x00\x06events" + struct.pack(">i", 0) + b"\x01",
    "marker cut": b"\x01\x00\x06events" + struct.pack(">iqh", 0, 7, 0),
    "marker with bytes after it": b"\x01\x00\x06events" + struct.pack(">iqhih", 0, 7, 0, 0, 1) + b"\x00",
    "marker of an unknown control type": b"\x01\x00\x06events" + struct.pack(">iqhih", 0, 7, 0, 0, 5),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_REQUESTS))
def test_a_malformed_request_raises_invalid_request(case: str) -> None:
    with pytest.raises(InvalidRequestError):
        decode_request(MALFORMED_REQUESTS[case])


@pytest.mark.parametrize("result", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_a_marker_request_round_trips(result: ControlRecordType) -> None:
    marker = TransactionMarker(2**63 - 1, 32767, 2**31 - 1, result)
    decoded = decode_request(body_of(encode_marker_request("événements", 2**31 - 1, marker)))
    assert decoded == MarkerRequest("événements", 2**31 - 1, marker)
    assert isinstance(decoded, MarkerRequest) and type(decoded.marker.result) is ControlRecordType


def test_a_coordinator_request_round_trips_with_its_batch_unchanged() -> None:
    batch = batch_bytes(simple_records(3))
    decoded = decode_request(body_of(encode_coordinator_request("__consumer_offsets", 49, batch)))
    assert isinstance(decoded, CoordinatorRequest)
    assert (decoded.topic, decoded.partition, bytes(decoded.batch)) == ("__consumer_offsets", 49, batch)


def test_an_append_request_decodes_as_an_append_request() -> None:
    assert isinstance(decode_request(body_of(encode_request("events", 0, 1, b""))), AppendRequest)


def test_random_request_bodies_raise_only_invalid_request() -> None:
    generator = random.Random(20261123)
    for _ in range(2000):
        body = generator.randbytes(generator.randrange(0, 24))
        with contextlib.suppress(InvalidRequestError):
            decode_request(body)


# --- answers -----------------------------------------------------------------------------------------------------


INFOS = {
    "one batch": LogAppendInfo(0, 2, 1_700_000_000_002, 2, -1, 0, 3, 1, 124, ((0, 2),)),
    "several batches": LogAppendInfo(10, 19, 5, 13, 1_700_000_000_000, 4, 10, 3, 999, ((10, 12), (13, 13), (14, 19))),
    "duplicate": LogAppendInfo(0, 2, -1, -1, -1, 0, 3, 1, 124, ((0, 2),), duplicate=True),
    "no batch offsets": LogAppendInfo(7, 7, 1, 7, -1, 0, 1, 1, 70),
    "extreme integers": LogAppendInfo(
        2**63 - 1, -(2**63), -1, 2**62, -(2**62), 0, 2**31, 2**31 - 1, 2**40, ((2**63 - 1, -(2**63)),)
    ),
}


@pytest.mark.parametrize("case", sorted(INFOS))
def test_an_answer_round_trips_to_an_equal_log_append_info(case: str) -> None:
    decoded = decode_answer(body_of(encode_answer(INFOS[case])))
    assert isinstance(decoded, LogAppendInfo)
    assert decoded == INFOS[case]
    assert type(decoded.duplicate) is bool and isinstance(decoded.batch_offsets, tuple)


def test_the_answer_to_a_real_append_and_its_retry_round_trip(tmp_path: Path) -> None:
    part = PartitionLogActor(str(tmp_path / "events-0"), {})
    try:
        part.append(batch_bytes(simple_records(4)))
        batch = batch_bytes(simple_records(3, tag=1), producer_id=9, producer_epoch=0, base_sequence=0)
        first = part.append(
            batch + batch_bytes(simple_records(2, tag=2), producer_id=9, producer_epoch=0, base_sequence=3)
        )
        retry = part.append(batch)
    finally:
        part.close()
    assert first.batch_offsets == ((4, 6), (7, 8)) and retry.duplicate
    for info in (first, retry):
        assert decode_answer(body_of(encode_answer(info))) == info


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_every_storage_error_comes_back_as_its_own_type_and_text(cls: type[RaybrokerError]) -> None:
    error = cls("append refused: ü 日本 (détail)")
    decoded = decode_answer(body_of(encode_error(error)))
    assert type(decoded) is cls
    assert str(decoded) == str(error)


def test_an_errors_rendered_fields_come_back_in_its_text() -> None:
    error = CorruptRecordError("record batch CRC mismatch", path="/logs/events-0/0.log", position=61, offset=4)
    decoded = decode_answer(body_of(encode_error(error)))
    assert type(decoded) is CorruptRecordError
    assert str(decoded) == "record batch CRC mismatch (file /logs/events-0/0.log, position 61, offset 4)"


def test_an_errors_fields_survive_as_they_do_through_ray() -> None:
    error = KafkaStorageError("log dir is offline", path="/logs/events-0", position=3, offset=12)
    decoded = decode_answer(body_of(encode_error(error)))
    assert isinstance(decoded, KafkaStorageError)
    assert (decoded.message, decoded.path, decoded.position, decoded.offset) == (
        error.message,
        error.path,
        error.position,
        error.offset,
    )


def test_an_error_outside_the_hierarchy_comes_back_as_a_plain_raybroker_error_naming_it() -> None:
    decoded = decode_answer(body_of(encode_error(ValueError("bad value"))))
    assert type(decoded) is RaybrokerError
    assert str(decoded) == "ValueError: bad value"


@pytest.mark.parametrize(
    "name",
    [
        "NoSuchError",
        "Path",  # a class storage.errors imports, not an error
        "os",
        "annotations",  # the __future__ feature storage.errors imports
        "_rebuild",  # a function of storage.errors
        "__builtins__",
        "Exception",
        "SegmentDeletedError",  # a KafkaStorageError defined in storage.segment, not in storage.errors
        "__import__('os').getcwd()",
        "",
    ],
)
def test_a_name_that_is_no_storage_error_gives_a_plain_raybroker_error(name: str) -> None:
    direct = error_named(name, "the message")
    assert type(direct) is RaybrokerError and str(direct) == f"{name}: the message"
    decoded = decode_answer(error_body(name.encode("ascii"), b"the message"))
    assert type(decoded) is RaybrokerError and str(decoded) == f"{name}: the message"


def test_error_named_finds_the_classes_of_storage_errors() -> None:
    assert type(error_named("BrokerNotAvailableError", "gone")) is BrokerNotAvailableError
    assert type(error_named("RaybrokerError", "plain")) is RaybrokerError
    assert str(error_named("RaybrokerError", "plain")) == "plain"


MALFORMED_ANSWERS = {
    "empty": b"",
    "unknown kind 2": b"\x02",
    "unknown kind 255": b"\xff" + bytes(100),
    "ok without its integers": b"\x00" + bytes(20),
    "ok with one batch too few": body_of(encode_answer(INFOS["several batches"]))[:-16],
    "ok with a batch cut": body_of(encode_answer(INFOS["several batches"]))[:-3],
    "ok with bytes after the batches": body_of(encode_answer(INFOS["one batch"])) + b"\x00",
    "ok counting more batches than sent": body_of(encode_answer(INFOS["one batch"]))[:-20]
    + struct.pack(">I", 2)
    + body_of(encode_answer(INFOS["one batch"]))[-16:],
    "error without its name length": b"\x01\x00",
    "error name not ASCII": error_body("Corrupt\u00e9".encode(), b"m"),
    "error message not UTF-8": error_body(b"CorruptRecordError", b"\xff\xfe"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_ANSWERS))
def test_a_malformed_answer_raises_invalid_request(case: str) -> None:
    with pytest.raises(InvalidRequestError):
        decode_answer(MALFORMED_ANSWERS[case])


def test_an_error_answer_whose_name_runs_past_the_body_raises_invalid_request() -> None:
    with pytest.raises(InvalidRequestError):
        decode_answer(error_body(b"CorruptRecordError", b"", name_size=200))


def test_random_answer_bodies_raise_only_invalid_request() -> None:
    generator = random.Random(1123)
    for _ in range(3000):
        kind = generator.choice([b"\x00", b"\x01", b""])
        body = kind + generator.randbytes(generator.randrange(0, 120))
        try:
            decoded = decode_answer(body)
        except InvalidRequestError:
            continue
        assert isinstance(decoded, LogAppendInfo | RaybrokerError)


def test_the_request_limit_is_kafkas_socket_request_max_bytes_default() -> None:
    assert SOCKET_REQUEST_MAX_BYTES == 100 * 1024 * 1024
