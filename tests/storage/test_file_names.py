"""Tests for `storage.file_names`: every name in a log dir, and the parsers back."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import file_names
from storage.errors import InvalidTopicError
from storage.file_names import (
    offset_name,
    parse_kraft_snapshot_name,
    parse_partition_dir_name,
    parse_segment_name,
    partition_dir_name,
    validate_topic,
)

DIR = Path("/data/kafka-logs/my-topic-0")
TOPIC_CHARS = "abcxyzABCXYZ0189._-"


def oracle_is_valid_topic(topic: str) -> bool:
    return (
        0 < len(topic) <= 249
        and topic not in (".", "..")
        and all(char in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-" for char in topic)
    )


# --- segment names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "name"),
    [(0, "00000000000000000000"), (368769, "00000000000000368769"), (2**63 - 1, "09223372036854775807")],
)
def test_offset_names_have_20_digits(offset: int, name: str) -> None:
    assert offset_name(offset) == name
    assert len(name) == file_names.OFFSET_DIGITS == 20


def test_segment_file_paths() -> None:
    assert file_names.log_file(DIR, 42) == DIR / "00000000000000000042.log"
    assert file_names.index_file(DIR, 42) == DIR / "00000000000000000042.index"
    assert file_names.time_index_file(DIR, 42) == DIR / "00000000000000000042.timeindex"
    assert file_names.txn_index_file(DIR, 42) == DIR / "00000000000000000042.txnindex"
    assert file_names.producer_snapshot_file(DIR, 42) == DIR / "00000000000000000042.snapshot"
    assert file_names.log_file(DIR, 42, file_names.SWAP_SUFFIX) == DIR / "00000000000000000042.log.swap"
    assert file_names.segment_files(DIR, 7, file_names.CLEANED_SUFFIX) == (
        DIR / "00000000000000000007.log.cleaned",
        DIR / "00000000000000000007.index.cleaned",
        DIR / "00000000000000000007.timeindex.cleaned",
        DIR / "00000000000000000007.txnindex.cleaned",
    )


def test_kafka_file_name_constants() -> None:
    assert (file_names.LOG_SUFFIX, file_names.INDEX_SUFFIX, file_names.TIME_INDEX_SUFFIX) == (
        ".log",
        ".index",
        ".timeindex",
    )
    assert (file_names.DELETED_SUFFIX, file_names.CLEANED_SUFFIX, file_names.SWAP_SUFFIX) == (
        ".deleted",
        ".cleaned",
        ".swap",
    )
    assert file_names.CLEAN_SHUTDOWN_FILE == ".kafka_cleanshutdown"
    assert file_names.RECOVERY_POINT_CHECKPOINT == "recovery-point-offset-checkpoint"
    assert file_names.LOG_START_OFFSET_CHECKPOINT == "log-start-offset-checkpoint"
    assert file_names.REPLICATION_OFFSET_CHECKPOINT == "replication-offset-checkpoint"
    assert file_names.CLEANER_OFFSET_CHECKPOINT == "cleaner-offset-checkpoint"
    assert file_names.LEADER_EPOCH_CHECKPOINT == "leader-epoch-checkpoint"
    assert file_names.PARTITION_METADATA == "partition.metadata"
    assert file_names.META_PROPERTIES == "meta.properties"


@pytest.mark.parametrize("kind", [*file_names.SEGMENT_SUFFIXES, file_names.PRODUCER_SNAPSHOT_SUFFIX])
@pytest.mark.parametrize("suffix", ["", *file_names.IN_FLIGHT_SUFFIXES])
@pytest.mark.parametrize("offset", [0, 1, 368769, 2**63 - 1])
def test_segment_names_parse_back(kind: str, suffix: str, offset: int) -> None:
    name = f"{offset_name(offset)}{kind}{suffix}"
    assert parse_segment_name(name) == (offset, kind, suffix)


def test_built_paths_parse_back() -> None:
    for path in file_names.segment_files(DIR, 99, file_names.DELETED_SUFFIX):
        parsed = parse_segment_name(path.name)
        assert parsed is not None and parsed[0] == 99 and parsed[2] == ".deleted"


@pytest.mark.parametrize(
    "name",
    [
        "0000000000000000042.log",  # 19 digits
        "000000000000000000042.log",  # 21 digits
        "00000000000000000042",
        "00000000000000000042.LOG",
        "00000000000000000042.log.tmp",
        "00000000000000000042.log.swap.deleted",
        "00000000000000000042.log\n",
        "00000000000000000042.log.deleted\n",
        "\u0660" * 20 + ".log",  # Arabic-Indic digits are not Kafka's
        "0000000000000000004\u0662.log",
        "x0000000000000000042.log",
        "leader-epoch-checkpoint",
        "partition.metadata",
        "",
    ],
)
def test_non_segment_names(name: str) -> None:
    assert parse_segment_name(name) is None


def test_in_flight_suffix_helpers() -> None:
    log = file_names.log_file(DIR, 5)
    swap = file_names.with_suffix(log, file_names.SWAP_SUFFIX)
    assert swap.name == "00000000000000000005.log.swap"
    assert file_names.without_suffix(swap, file_names.SWAP_SUFFIX) == log
    assert file_names.tmp_file(DIR / "recovery-point-offset-checkpoint").name == "recovery-point-offset-checkpoint.tmp"
    with pytest.raises(ValueError):
        file_names.without_suffix(log, file_names.SWAP_SUFFIX)


# --- topics and partition dirs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "topic", ["a", "my-topic", "my_topic.v2", "__consumer_offsets", "...", "-", "a" * 249, "A-Z.0_9"]
)
def test_valid_topics(topic: str) -> None:
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    "topic",
    [
        "",
        ".",
        "..",
        "../x",
        "../../etc/passwd",
        "a/b",
        "/abs",
        "a\\b",
        "a\x00b",
        "\x00",
        "a" * 250,
        "topic name",
        "tópico",
        "topic\n",
        "topic\r",
        "top\tic",
        "tópic",
        "\uff54opic",  # full-width letter
        "\u0661",  # Arabic-Indic digit
    ],
)
def test_invalid_topics(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic(topic)


@pytest.mark.parametrize("topic", [None, 5, b"topic"])
def test_topic_must_be_a_string(topic: object) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic(topic)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from([*TOPIC_CHARS, "/", "\x00", "é", " ", "\n"]), max_size=260))
def test_validate_topic_matches_the_oracle(topic: str) -> None:
    if oracle_is_valid_topic(topic):
        assert validate_topic(topic) == topic
    else:
        with pytest.raises(InvalidTopicError):
            validate_topic(topic)


@pytest.mark.parametrize(
    ("topic", "partition", "name"),
    [("my-topic", 3, "my-topic-3"), ("t", 0, "t-0"), ("a-b-c", 10, "a-b-c-10"), ("x", 2**31 - 1, "x-2147483647")],
)
def test_partition_dir_names_round_trip(topic: str, partition: int, name: str) -> None:
    assert partition_dir_name(topic, partition) == name
    assert parse_partition_dir_name(name) == (topic, partition)


@pytest.mark.parametrize(("topic", "partition"), [("ok", -1), ("ok", True), ("ok", 1.0), ("../x", 0), ("", 0)])
def test_invalid_partition_dirs(topic: str, partition: object) -> None:
    with pytest.raises(InvalidTopicError):
        partition_dir_name(topic, partition)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(topic=st.text(alphabet=st.sampled_from(TOPIC_CHARS), min_size=1, max_size=249), partition=st.integers(0, 10**6))
def test_any_valid_partition_dir_parses_back(topic: str, partition: int) -> None:
    if topic in (".", ".."):
        return
    assert parse_partition_dir_name(partition_dir_name(topic, partition)) == (topic, partition)


@pytest.mark.parametrize(
    "name",
    [
        "topic",
        "topic-",
        "-3",
        "topic-x",
        "topic-3a",
        "topic--",
        "topic-+3",
        "topic- 3",
        "topic-3\n",
        "topic-\u00b2",  # superscript two: str.isdigit() says yes, int() says no
        "topic-\u0663",  # Arabic-Indic three
        "my-topic-0.a6a0df1b2c8b4a0f9e1d2c3b4a5f6e7d-delete",
        "my-topic-0.a6a0df1b2c8b4a0f9e1d2c3b4a5f6e7d-future",
        "my-topic-0.a6a0df1b2c8b4a0f9e1d2c3b4a5f6e7d-stray",
        "a/b-0",
        "..-0",
        ".-0",
        "a" * 250 + "-0",
        "tópic-0",
    ],
)
def test_names_that_are_not_live_partitions(name: str) -> None:
    assert parse_partition_dir_name(name) is None


def test_delete_dir_names() -> None:
    unique = "a6a0df1b2c8b4a0f9e1d2c3b4a5f6e7d"
    name = file_names.delete_dir_name("my-topic", 3, unique)
    assert name == f"my-topic-3.{unique}-delete"
    assert file_names.is_delete_dir_name(name)
    assert not file_names.is_delete_dir_name("my-topic-3")
    assert parse_partition_dir_name(name) is None
    long_name = file_names.delete_dir_name("t" * 249, 2**31 - 1, unique)
    assert len(long_name) == 255
    assert long_name.endswith(f"-2147483647.{unique}-delete")
    assert file_names.is_delete_dir_name(long_name)


def test_stray_dir_names_parse_back_to_their_partition() -> None:
    unique = "a6a0df1b2c8b4a0f9e1d2c3b4a5f6e7d"
    name = file_names.stray_dir_name("my-topic", 3, unique)
    assert name == f"my-topic-3.{unique}-stray"
    assert file_names.parse_stray_dir_name(name) == ("my-topic", 3)
    assert parse_partition_dir_name(name) is None
    assert not file_names.is_delete_dir_name(name)
    for other in ("my-topic-3", file_names.delete_dir_name("my-topic", 3, unique), f"my-topic-3.{unique[:-1]}-stray"):
        assert file_names.parse_stray_dir_name(other) is None
    long_name = file_names.stray_dir_name("t" * 249, 2**31 - 1, unique)
    assert len(long_name) == 255
    assert file_names.parse_stray_dir_name(long_name) == ("t" * (255 - len(f"-2147483647.{unique}-stray")), 2**31 - 1)


def test_kraft_snapshot_names() -> None:
    assert parse_kraft_snapshot_name("00000000000000007364-0000000001.checkpoint") == (7364, 1)
    assert parse_kraft_snapshot_name("00000000000000007364-0000000001.checkpoint.deleted") is None
    assert parse_kraft_snapshot_name("7364-1.checkpoint") is None
    assert parse_kraft_snapshot_name("00000000000000007364-0000000001.checkpoint\n") is None
