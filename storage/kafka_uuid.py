"""Kafka's `Uuid`: the 128-bit ids of topics (KIP-516), log dirs (`directory.id`) and clusters, and their text.

Value: a `uuid.UUID` (the type kio's schemas carry on the wire as 16 big-endian bytes). Text, as Kafka writes it in
`partition.metadata`, `meta.properties` and its tools' output: the 16 bytes in unpadded base64url, 22 characters,
e.g. `nigi0dJNRASJVYh5eRn0Vg`.

Reserved ids, never handed out: `ZERO_UUID` (Kafka's "no id": a sessionless name-based request, a topic without
an id) and `ONE_UUID` (`METADATA_TOPIC_ID`, the id of `__cluster_metadata`). A random id is a version-4 UUID, drawn
again while it is reserved or its text starts with `-` (Kafka's tools would read it as a flag); the version nibble
makes the most significant half non-zero, so a draw never is one of the reserved ids, whose high half is 0.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid

ZERO_UUID = uuid.UUID(int=0)
ONE_UUID = uuid.UUID(int=1)
METADATA_TOPIC_ID = ONE_UUID
RESERVED = frozenset({ZERO_UUID, ONE_UUID})
# Kafka's `Uuid.fromString` refuses longer text before decoding it: 22 characters, 24 with base64 padding.
MAX_TEXT_LENGTH = 24
UUID_BYTES = 16
# Java's URL-safe decoder: the base64url alphabet (`+` and `/` are refused), then at most two `=`.
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def random_uuid() -> uuid.UUID:
    """A fresh random id that is neither reserved nor spelled with a leading `-` (Kafka's `Uuid.randomUuid`)."""
    while True:
        drawn = uuid.uuid4()
        if drawn not in RESERVED and not uuid_text(drawn).startswith("-"):
            return drawn


def uuid_text(value: uuid.UUID) -> str:
    """The id as Kafka prints it (`Uuid.toString`): unpadded base64url of its 16 bytes."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def parse_uuid(text: str) -> uuid.UUID:
    """The id `text` spells (Kafka's `Uuid.fromString`: base64url, padding optional); `ValueError` for text longer
    than 24 characters, outside the base64url alphabet, or not decoding to exactly 16 bytes."""
    if not isinstance(text, str) or len(text) > MAX_TEXT_LENGTH or not _BASE64URL.fullmatch(text):
        raise ValueError(f"{text!r} is not a base64url UUID")
    unpadded = text.rstrip("=")
    try:
        raw = base64.b64decode(unpadded + "=" * (-len(unpadded) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{text!r} is not a base64 UUID: {exc}") from None
    if len(raw) != UUID_BYTES:
        raise ValueError(f"{text!r} decodes to {len(raw)} bytes, not the {UUID_BYTES} of a UUID")
    return uuid.UUID(bytes=raw)
