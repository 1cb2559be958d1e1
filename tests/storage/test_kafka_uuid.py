"""Kafka's Uuid text and random ids, against ids a real Kafka wrote (`partition.metadata` of the Kafka fixtures) and
Kafka's `Uuid` rules: unpadded base64url both ways, never a reserved id or text starting with `-`."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from storage import kafka_uuid
from storage.kafka_uuid import ONE_UUID, RESERVED, ZERO_UUID, parse_uuid, random_uuid, uuid_text


def test_ids_kafka_wrote_read_and_print_back_to_the_same_text(kafka_samples_dir: Path) -> None:
    files = sorted(kafka_samples_dir.glob("*/*/*/partition.metadata"))
    assert len(files) >= 10
    for path in files:
        text = path.read_text().splitlines()[1].removeprefix("topic_id: ")
        assert uuid_text(parse_uuid(text)) == text


def test_known_values() -> None:
    assert uuid_text(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuid_text(ONE_UUID) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert parse_uuid("AAAAAAAAAAAAAAAAAAAAAQ==") == ONE_UUID


@pytest.mark.parametrize(
    "text",
    ["", "AAAA", "A" * 25, "AAAAAAAAAAAAAAAAAAAAA!", "AAAAAAAAAAAAAAAAAAAAAA" + "AA", "AAAAAAAAAAAAAAAAAAAA+/"],
)
def test_text_that_is_no_uuid_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_uuid(text)


def test_random_ids_are_distinct_and_never_reserved() -> None:
    ids = {random_uuid() for _ in range(2000)}
    assert len(ids) == 2000
    assert not ids & RESERVED
    assert not any(uuid_text(drawn).startswith("-") for drawn in ids)


def test_a_draw_spelled_with_a_leading_dash_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    dash_first = uuid.UUID(bytes=bytes([0xF8]) + bytes(range(1, 16)))
    assert uuid_text(dash_first).startswith("-")
    fine = uuid.UUID(int=2**100)
    draws = iter([dash_first, fine])
    monkeypatch.setattr(kafka_uuid.uuid, "uuid4", lambda: next(draws))
    assert random_uuid() == fine
