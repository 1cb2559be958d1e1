"""The frames of a channel that carries a role's method calls by name (the group channel,
`actors.channels.group_channel`): the method, its arguments and its result in MessagePack, with a closed set of
the role's own types.

- A request: `size` (u32, the bytes after it), then one MessagePack array: the method's name, its positional
  arguments (an array) and its keyword arguments (a map of names).
- An answer: `size` (u32), then its kind (u8): `ANSWER_VALUE` (0) and the result as one MessagePack value, or
  `ANSWER_ERROR` (1), the append channel's error answer (`actors.channels.append_frames.encode_error`): the typed
  error the Ray call would have raised.

Values are MessagePack's own (None, bools, ints, floats, strings, bytes, arrays as lists, maps as dicts of any
keys; any other mapping is sent as a map) and these extension types: a tuple, a frozenset, a set, a `uuid.UUID`, a
member of one of the codec's enums (its class's name and value) and an instance of one of the codec's dataclasses
(its class's name and its fields in order). Nothing else is encoded (`TypeError`), and nothing else decodes: an
unknown extension or class name raises `InvalidRequestError`, as do bytes that do not parse. Nothing is unpickled or
evaluated: a decoded value is built only by a listed class's constructor from decoded values.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import msgpack

from actors.channels.append_frames import ANSWER_ERROR, SIZE, decode_error
from storage.errors import InvalidRequestError

ANSWER_VALUE = 0

_KIND = struct.Struct(">B")
_TUPLE = 1
_FROZENSET = 2
_SET = 3
_UUID = 4
_ENUM = 5
_DATACLASS = 6


class CallCodec:
    """Encodes and decodes a channel's calls with `types` (enums and dataclasses whose fields are all set by their
    constructor) as its only classes; see the module docstring."""

    def __init__(self, types: Iterable[type]) -> None:
        self._enums: dict[str, type[enum.Enum]] = {}
        self._dataclasses: dict[str, tuple[type, tuple[str, ...]]] = {}
        for kind in types:
            if issubclass(kind, enum.Enum):
                self._enums[kind.__qualname__] = kind
            elif dataclasses.is_dataclass(kind):
                fields = dataclasses.fields(kind)
                if not all(field.init for field in fields):
                    raise TypeError(f"{kind.__qualname__} has fields its constructor does not set")
                self._dataclasses[kind.__qualname__] = (kind, tuple(field.name for field in fields))
            else:
                raise TypeError(f"{kind.__qualname__} is neither an enum nor a dataclass")

    def encode_request(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        """The request frame calling `method(*args, **kwargs)`."""
        return _framed(self._pack([method, list(args), kwargs]))

    def decode_request(self, body: bytes) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
        """The method, positional and keyword arguments a request frame's body (the bytes after its size) carries."""
        request = self._unpack(body)
        if not (isinstance(request, list) and len(request) == 3):
            raise InvalidRequestError("a call frame that is not [method, arguments, keyword arguments]")
        method, args, kwargs = request
        if not (
            isinstance(method, str)
            and isinstance(args, list)
            and isinstance(kwargs, dict)
            and all(isinstance(name, str) for name in kwargs)
        ):
            raise InvalidRequestError("a call frame whose method, arguments or keyword arguments are malformed")
        return method, tuple(args), kwargs

    def encode_value(self, value: Any) -> bytes:
        """The answer frame carrying a call's result."""
        return _framed(_KIND.pack(ANSWER_VALUE) + self._pack(value))

    def decode_answer(self, body: bytes) -> Any:
        """What an answer frame's body carries: the call's result, or the typed error (a `RaybrokerError` instance,
        returned, not raised) the call raised."""
        if not body:
            raise InvalidRequestError("an empty call answer")
        if body[0] == ANSWER_ERROR:
            return decode_error(body)
        if body[0] != ANSWER_VALUE:
            raise InvalidRequestError(f"a call answer of unknown kind {body[0]}")
        return self._unpack(memoryview(body)[_KIND.size :])

    def _pack(self, value: Any) -> bytes:
        packed: bytes = msgpack.packb(value, default=self._extension, use_bin_type=True, strict_types=True)
        return packed

    def _extension(self, value: Any) -> Any:
        kind = type(value)
        if kind is tuple:
            return msgpack.ExtType(_TUPLE, self._pack(list(value)))
        if kind is frozenset:
            return msgpack.ExtType(_FROZENSET, self._pack(list(value)))
        if kind is set:
            return msgpack.ExtType(_SET, self._pack(list(value)))
        if kind is uuid.UUID:
            return msgpack.ExtType(_UUID, value.bytes)
        if isinstance(value, Mapping):
            return dict(value)
        name = kind.__qualname__
        if isinstance(value, enum.Enum) and self._enums.get(name) is kind:
            return msgpack.ExtType(_ENUM, self._pack([name, value.value]))
        known = self._dataclasses.get(name)
        if known is not None and known[0] is kind:
            return msgpack.ExtType(_DATACLASS, self._pack([name, [getattr(value, field) for field in known[1]]]))
        raise TypeError(f"a call channel does not carry {name} values")

    def _unpack(self, data: bytes | memoryview) -> Any:
        try:
            return msgpack.unpackb(data, ext_hook=self._decode_extension, raw=False, strict_map_key=False)
        except InvalidRequestError:
            raise
        except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
            raise InvalidRequestError(f"a call frame that does not parse: {exc}") from None

    def _decode_extension(self, code: int, data: bytes) -> Any:
        if code == _UUID:
            if len(data) != 16:
                raise InvalidRequestError(f"a uuid of {len(data)} bytes")
            return uuid.UUID(bytes=data)
        if code not in (_TUPLE, _FROZENSET, _SET, _ENUM, _DATACLASS):
            raise InvalidRequestError(f"a call frame's value of unknown extension {code}")
        items = self._unpack(data)
        if not isinstance(items, list):
            raise InvalidRequestError(f"a call frame's extension {code} that is not an array")
        if code == _TUPLE:
            return tuple(items)
        if code in (_FROZENSET, _SET):
            try:
                return frozenset(items) if code == _FROZENSET else set(items)
            except TypeError:
                raise InvalidRequestError("a set of unhashable values") from None
        if len(items) != 2 or not isinstance(items[0], str):
            raise InvalidRequestError("a call frame's class value that is not [name, value]")
        name, inner = items
        if code == _ENUM:
            known_enum = self._enums.get(name)
            if known_enum is None:
                raise InvalidRequestError(f"a call frame's value of unknown enum {name!r}")
            try:
                return known_enum(inner)
            except ValueError:
                raise InvalidRequestError(f"{inner!r} is no {name}") from None
        known = self._dataclasses.get(name)
        if known is None:
            raise InvalidRequestError(f"a call frame's value of unknown class {name!r}")
        kind, fields = known
        if not (isinstance(inner, list) and len(inner) == len(fields)):
            raise InvalidRequestError(f"a {name} of {len(inner) if isinstance(inner, list) else 'no'} fields")
        try:
            return kind(*inner)
        except (TypeError, ValueError) as exc:
            raise InvalidRequestError(f"a {name} its constructor refuses: {exc}") from None


def _framed(body: bytes) -> bytes:
    return SIZE.pack(len(body)) + body


__all__ = ["ANSWER_VALUE", "CallCodec"]
