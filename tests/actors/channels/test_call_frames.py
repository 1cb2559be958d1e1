"""The call codec (`actors.channels.call_frames`) with the group channel's classes: any tree of the values it
carries comes back equal and of the same types (hypothesis), a call frame comes back as its method and arguments,
an error answer as the typed error, and everything else is refused: values of classes it does not list on the
way out (`TypeError`), and on the way in unknown extensions, unknown or unlisted class names, wrong field counts,
values a listed constructor refuses, and random bytes (`InvalidRequestError` only)."""

from __future__ import annotations

import enum
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.channels.append_frames import SIZE, encode_error
from actors.channels.call_frames import CallCodec
from actors.channels.group_frames import GROUP_CODEC
from actors.core.groups.consumer_group_api import HeartbeatRequest, HeartbeatResult
from actors.core.groups.group_membership import (
    GroupDescription,
    GroupError,
    GroupState,
    JoinMember,
    JoinResult,
    MemberDescription,
)
from actors.core.shares.group_share_config import DeadLetterSettings, ResolvedShareConfig
from storage.errors import CoordinatorLoadInProgressError, InvalidRequestError
from storage.records.consumer_offsets import OffsetAndMetadata

names = st.text(max_size=12)
ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
scalars = st.one_of(
    st.none(), st.booleans(), ints, st.floats(allow_nan=False), names, st.binary(max_size=16), st.uuids()
)
hashables = st.recursive(
    st.one_of(st.none(), st.booleans(), ints, names, st.binary(max_size=8), st.uuids()),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
offsets = st.builds(OffsetAndMetadata, st.integers(0, 2**62), st.integers(-1, 2**31 - 1), names)
join_results = st.builds(
    JoinResult,
    st.sampled_from(GroupError),
    names,
    st.integers(-1, 2**31 - 1),
    st.none() | names,
    st.none() | names,
    names,
    st.lists(st.builds(JoinMember, names, st.none() | names, st.binary(max_size=16)), max_size=3).map(tuple),
    st.booleans(),
)
heartbeats = st.builds(
    HeartbeatResult,
    st.sampled_from(GroupError),
    st.none() | names,
    st.none() | names,
    st.integers(-2, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.none() | st.dictionaries(st.uuids(), st.frozensets(st.integers(0, 1000), max_size=4), max_size=3),
)
values = st.recursive(
    st.one_of(scalars, offsets, join_results, heartbeats, st.sampled_from(GroupError), st.sampled_from(GroupState)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.sets(hashables, max_size=4),
        st.frozensets(hashables, max_size=4),
        st.dictionaries(hashables, inner, max_size=4),
    ),
    max_leaves=12,
)


def same(left: Any, right: Any) -> bool:
    """Equal, and of the same types all the way down (a tuple is no list, a frozenset no set)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, (list, tuple)):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same(left[key], right[key]) for key in left)
    return bool(left == right)


def answered(frame: bytes) -> Any:
    (size,) = SIZE.unpack_from(frame)
    assert size == len(frame) - SIZE.size
    return GROUP_CODEC.decode_answer(frame[SIZE.size :])


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(values)
def test_every_value_it_carries_comes_back_equal_and_of_the_same_types(value: Any) -> None:
    assert same(answered(GROUP_CODEC.encode_value(value)), value)


def test_a_call_comes_back_as_its_method_and_arguments() -> None:
    owned = {uuid.uuid4(): frozenset({0, 3})}
    request = HeartbeatRequest("g", "m", 4, subscribed_topic_names=("a", "b"), owned=owned)
    frame = GROUP_CODEC.encode_request("commit_member", ("g", request, {("t", 0): OffsetAndMetadata(5)}), {"v": 8})
    method, args, kwargs = GROUP_CODEC.decode_request(frame[SIZE.size :])
    assert (method, kwargs) == ("commit_member", {"v": 8})
    assert same(args, ("g", request, {("t", 0): OffsetAndMetadata(5)}))
    assert args[1].owned == owned and type(args[1].subscribed_topic_names) is tuple


def test_a_group_description_with_its_members_comes_back_whole() -> None:
    member = MemberDescription("m-1", "instance", "client", "/127.0.0.1", b"\x00\x01", b"\x02")
    described = [GroupDescription("g", GroupState.STABLE, "consumer", "range", 7, (member,))]
    assert same(answered(GROUP_CODEC.encode_value(described)), described)


def test_an_error_answer_is_the_typed_error() -> None:
    error = GROUP_CODEC.decode_answer(encode_error(CoordinatorLoadInProgressError("loading"))[SIZE.size :])
    assert type(error) is CoordinatorLoadInProgressError and error.retriable and "loading" in str(error)


class Unlisted(enum.Enum):
    A = 1


@dataclass(frozen=True)
class Point:
    x: int
    y: int = 0


@dataclass
class Derived:
    value: int
    computed: int = field(init=False, default=0)


@pytest.mark.parametrize("value", [object(), Unlisted.A, Point(1, 2), ValueError("x"), 1j])
def test_values_of_classes_it_does_not_list_are_not_encoded(value: object) -> None:
    with pytest.raises(TypeError):
        GROUP_CODEC.encode_value(value)


def test_only_enums_and_dataclasses_set_by_their_constructor_can_be_listed() -> None:
    for kind in (Derived, int, ValueError):
        with pytest.raises(TypeError):
            CallCodec((kind,))


def ext(code: int, inner: Any) -> msgpack.ExtType:
    return msgpack.ExtType(code, msgpack.packb(inner, use_bin_type=True))


def value_body(packed: Any) -> bytes:
    return b"\x00" + msgpack.packb(packed, use_bin_type=True)


REFUSED = {
    "empty": b"",
    "unknown answer kind": b"\x09" + msgpack.packb(1),
    "cut value": b"\x00\x92\x01",
    "unknown extension": value_body(msgpack.ExtType(42, b"")),
    "a uuid of 3 bytes": value_body(msgpack.ExtType(4, b"abc")),
    "an extension that is not an array": value_body(ext(1, 5)),
    "an unknown enum": value_body(ext(5, ["Unlisted", 1])),
    "a value no member has": value_body(ext(5, ["GroupError", "NO_SUCH_ERROR_VALUE"])),
    "an unknown class": value_body(ext(6, ["os.system", ["true"]])),
    "too few fields": value_body(ext(6, ["OffsetAndMetadata", []])),
    "too many fields": value_body(ext(6, ["OffsetAndMetadata", [1, 2, "", 4]])),
    "a class value without a name": value_body(ext(6, [1, [1]])),
    "an unhashable set member": value_body(ext(2, [[1]])),
    "an unhashable map key": b"\x00\x81\x91\x01\x01",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_answers_that_do_not_decode_are_refused_as_invalid_request(case: str) -> None:
    with pytest.raises(InvalidRequestError):
        GROUP_CODEC.decode_answer(REFUSED[case])


@pytest.mark.parametrize(
    "request_value",
    [5, [], ["m", [], {}, 1], [1, [], {}], ["m", {}, {}], ["m", [], []], ["m", [], {1: 2}]],
)
def test_requests_that_are_not_a_method_and_its_arguments_are_refused(request_value: Any) -> None:
    with pytest.raises(InvalidRequestError):
        GROUP_CODEC.decode_request(msgpack.packb(request_value, use_bin_type=True))


def test_random_bytes_raise_only_invalid_request_or_decode() -> None:
    generator = random.Random(20261127)
    for _ in range(3000):
        body = bytes([generator.choice((0, 0, 1))]) + generator.randbytes(generator.randrange(0, 40))
        try:
            GROUP_CODEC.decode_answer(body)
            GROUP_CODEC.decode_request(body[1:])
        except InvalidRequestError:
            pass


def test_a_share_groups_settings_come_back_with_their_dead_letter_topic() -> None:
    """The settings a listener asks the coordinator for at each ShareFetch, Kafka 4.4's dead-letter keys among them."""
    settings = ResolvedShareConfig(delivery_count_limit=3, dead_letters=DeadLetterSettings("dlq.t", True, "", True))
    assert same(answered(GROUP_CODEC.encode_value(settings)), settings)
