"""meta.properties: Kafka's validation rules, Java properties syntax, atomic writes, real broker files."""

from __future__ import annotations

import base64
import re
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import kafka_uuid
from storage.clock import MockClock
from storage.errors import CorruptCheckpointError, KafkaStorageError
from storage.file_names import META_PROPERTIES, tmp_file
from storage.files.meta_properties import (
    MetaProperties,
    format_meta_properties,
    format_properties,
    java_date_text,
    new_directory_id,
    parse_meta_properties,
    parse_properties,
    read_meta_properties,
    with_directory_id,
    write_meta_properties,
)
from tests.conftest import KAFKA_SAMPLES_DIR

SAMPLES = KAFKA_SAMPLES_DIR
NIKHIL = SAMPLES / "NikhilDighe9975__kafka_setup@8639fa41" / "kafka-logs" / META_PROPERTIES
ITUMELENG = (
    SAMPLES
    / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions@2f57540f"
    / "kafka-data"
    / META_PROPERTIES
)
WILLIAM = SAMPLES / "William0423__kafka@499e39fa" / "kafka-logs" / META_PROPERTIES
# java.util.Date.toString(): "Thu Jul 18 18:09:58 IST 2024".
JAVA_DATE_COMMENT = re.compile(r"^#[A-Z][a-z]{2} [A-Z][a-z]{2} \d{2} \d{2}:\d{2}:\d{2} [A-Z]+ \d{4}$")
CLOCK = MockClock(start_ms=1_700_000_000_000)


def sample_files() -> list[Path]:
    return sorted(SAMPLES.rglob(META_PROPERTIES))


def write_raw(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


# --- real Kafka files ---------------------------------------------------------------------------------------


def test_fixture_files_read_as_kafka_wrote_them() -> None:
    assert read_meta_properties(NIKHIL) == MetaProperties(version=0, cluster_id="XB4QhweWTe-kZwMNW25y1A", node_id=0)
    assert read_meta_properties(ITUMELENG) == MetaProperties(
        version=1, cluster_id="MkU3OEVBNTcwNTJENDM2Qk", node_id=1, directory_id="ROP8qUaSlk7r55i85yz4Cg"
    )
    assert read_meta_properties(WILLIAM) == MetaProperties(version=0, node_id=0)


@pytest.mark.parametrize("source", [NIKHIL, ITUMELENG, WILLIAM], ids=lambda path: path.parts[-3])
def test_fixture_files_survive_read_write_read(source: Path, tmp_path: Path) -> None:
    meta = read_meta_properties(source)
    target = tmp_path / META_PROPERTIES
    write_meta_properties(target, meta, clock=CLOCK)
    assert read_meta_properties(target) == meta


def test_sorted_key_file_is_reproduced_after_the_date_comment(tmp_path: Path) -> None:
    original = NIKHIL.read_text("utf-8").splitlines(keepends=True)
    target = tmp_path / META_PROPERTIES
    write_meta_properties(target, read_meta_properties(NIKHIL), clock=CLOCK)
    written = target.read_text("utf-8").splitlines(keepends=True)
    assert written[0] == original[0] == "#\n"
    assert JAVA_DATE_COMMENT.match(original[1].rstrip("\n"))
    assert written[1] == "#Tue Nov 14 22:13:20 UTC 2023\n"
    assert written[2:] == original[2:]


def test_v1_keys_are_written_in_kafkas_sorted_order(tmp_path: Path) -> None:
    meta = MetaProperties(
        version=1, cluster_id="5L6g3nShT-eMCtK--X86sw", node_id=1, directory_id="WvVzx-Xl3swcqvxXsPbjww"
    )
    assert format_meta_properties(meta, clock=CLOCK) == (
        "#\n"
        "#Tue Nov 14 22:13:20 UTC 2023\n"
        "cluster.id=5L6g3nShT-eMCtK--X86sw\n"
        "directory.id=WvVzx-Xl3swcqvxXsPbjww\n"
        "node.id=1\n"
        "version=1\n"
    )


def test_every_sample_reads_and_survives_a_rewrite(tmp_path: Path) -> None:
    sources = sample_files()
    assert len(sources) >= 8
    sorted_samples = 0
    for index, source in enumerate(sources):
        lines = source.read_text("utf-8").splitlines(keepends=True)
        assert lines[0] == "#\n", source
        assert JAVA_DATE_COMMENT.match(lines[1].rstrip("\n")), source
        meta = read_meta_properties(source)
        target = tmp_path / f"{index}.properties"
        write_meta_properties(target, meta, clock=CLOCK)
        assert read_meta_properties(target) == meta, source
        if lines[2:] == sorted(lines[2:]):
            sorted_samples += 1
            assert target.read_text("utf-8").splitlines(keepends=True)[2:] == lines[2:], source
    assert sorted_samples >= 2


# --- Kafka's validation rules -------------------------------------------------------------------------------


def test_missing_version_means_v0_like_kafka() -> None:
    assert parse_meta_properties("broker.id=3\n") == MetaProperties(version=0, node_id=3)
    assert parse_meta_properties("") == MetaProperties(version=0)


def test_v0_reads_broker_id_and_keeps_node_id_as_extra() -> None:
    meta = parse_meta_properties("version=0\nbroker.id=4\nnode.id=9\n")
    assert meta.node_id == 4
    assert meta.extra == (("node.id", "9"),)


def test_v1_reads_node_id_and_keeps_broker_id_as_extra() -> None:
    meta = parse_meta_properties("version=1\ncluster.id=c\nnode.id=2\nbroker.id=7\n")
    assert meta.node_id == 2
    assert meta.extra == (("broker.id", "7"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version=2\nnode.id=1\n", "unknown meta.properties version 2"),
        ("version=x\n", "invalid meta.properties version"),
        ("version=1\nnode.id=1\n", "requires cluster.id"),
        ("version=1\ncluster.id=c\n", "requires node.id"),
        ("version=1\ncluster.id=c\nnode.id=one\n", "node.id"),
        ("version=0\nbroker.id=1.0\n", "broker.id"),
        ("version=0\nbroker.id=2147483648\n", "int32"),
        ("version=0\ndirectory.id=short\n", "directory.id"),
        ("version=0\ndirectory.id=ROP8qUaSlk7r55i85yz4C!\n", "directory.id"),
        ("version=0\nbad\\u12=x\n", "uxxxx"),
    ],
)
def test_invalid_files_raise_corrupt_checkpoint_with_path(tmp_path: Path, text: str, message: str) -> None:
    path = write_raw(tmp_path / META_PROPERTIES, text)
    with pytest.raises(CorruptCheckpointError, match=message) as info:
        read_meta_properties(path)
    assert info.value.path == str(path)


def test_version_is_trimmed_like_kafka() -> None:
    assert parse_meta_properties("version=1  \ncluster.id=c\nnode.id=5\n").version == 1


def test_non_utf8_file_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / META_PROPERTIES
    path.write_bytes(b"version=0\nbroker.id=\xff\n")
    with pytest.raises(CorruptCheckpointError) as info:
        read_meta_properties(path)
    assert info.value.position == 20


def test_missing_file_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaStorageError) as info:
        read_meta_properties(tmp_path / META_PROPERTIES)
    assert info.value.path == str(tmp_path / META_PROPERTIES)


@pytest.mark.parametrize(
    "fields",
    [
        {"version": 3},
        {"version": 1, "node_id": 1},
        {"version": 0, "node_id": True},
        {"version": 0, "node_id": -(2**31) - 1},
        {"version": 0, "directory_id": "A" * 23},
        {"version": 0, "extra": (("version", "1"),)},
        {"version": 0, "extra": (("broker.id", "1"),)},
        {"version": 0, "extra": (("k", 1),)},
        {"version": 0, "cluster_id": 5},
    ],
)
def test_invalid_objects_are_refused_on_creation(fields: dict) -> None:
    with pytest.raises(CorruptCheckpointError):
        MetaProperties(**fields)


def test_unknown_keys_are_preserved_and_order_does_not_matter(tmp_path: Path) -> None:
    first = parse_meta_properties("zeta=1\nversion=0\nalpha=two words\nbroker.id=1\n")
    second = parse_meta_properties("alpha=two words\nbroker.id=1\nversion=0\nzeta=1\n")
    assert first == second
    assert first.extra == (("alpha", "two words"), ("zeta", "1"))
    path = tmp_path / META_PROPERTIES
    write_meta_properties(path, first, clock=CLOCK)
    assert "alpha=two words\n" in path.read_text("utf-8")
    assert read_meta_properties(path) == first


# --- Java properties syntax ---------------------------------------------------------------------------------


def test_properties_load_syntax() -> None:
    text = (
        "# comment\n"
        "  ! another comment\n"
        "\n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "  d\t=\t4  \n"
        "e\n"
        "f=multi \\\n"
        "    line \\\n"
        "  value\n"
        "g=\\u00e9\\t\\n\\=\\:\\\\x\n"
        "h\\ key=v\n"
        "i==x\n"
        "a=last wins\r\n"
        "j=#not a comment\r"
        "k=eof backslash\\"
    )
    assert parse_properties(text) == {
        "a": "last wins",
        "b": "2",
        "c": "3",
        "d": "4  ",
        "e": "",
        "f": "multi line value",
        "g": "\u00e9\t\n=:\\x",
        "h key": "v",
        "i": "=x",
        "j": "#not a comment",
        "k": "eof backslash",
    }


def test_continuation_ends_at_an_empty_line_and_escaped_backslash_does_not_continue() -> None:
    assert parse_properties("a=x\\\n\nb=y\n") == {"a": "x", "b": "y"}
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}


_property_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_property_text.filter(bool), _property_text, max_size=8))
def test_any_properties_survive_store_then_load(props: dict[str, str]) -> None:
    assert parse_properties(format_properties(props, epoch_ms=0)) == props


def test_store_escapes_like_java() -> None:
    text = format_properties({"k e=y": " lead:#!\\\tend "}, epoch_ms=0)
    assert text.splitlines()[2] == "k\\ e\\=y=\\ lead\\:\\#\\!\\\\\\tend "


def test_java_date_text_matches_date_to_string_shape() -> None:
    assert java_date_text(0) == "Thu Jan 01 00:00:00 UTC 1970"
    assert java_date_text(1_728_561_430_000) == "Thu Oct 10 11:57:10 UTC 2024"


# --- directory ids ------------------------------------------------------------------------------------------


def test_new_directory_ids_are_kafka_uuid_text() -> None:
    ids = {new_directory_id() for _ in range(2000)}
    assert len(ids) == 2000
    for directory_id in ids:
        assert len(directory_id) == 22
        assert not directory_id.startswith("-")
        assert len(base64.urlsafe_b64decode(directory_id + "==")) == 16
        assert MetaProperties(version=0, directory_id=directory_id).directory_id == directory_id


def test_directory_id_starting_with_dash_is_redrawn(monkeypatch: pytest.MonkeyPatch) -> None:
    dash_first = uuid.UUID(bytes=bytes([0xF8]) + bytes(range(1, 16)))
    other = uuid.UUID(bytes=bytes([0x48]) + bytes(range(1, 16)))
    assert base64.urlsafe_b64encode(dash_first.bytes).startswith(b"-")
    draws = iter([dash_first, other])
    monkeypatch.setattr(kafka_uuid.uuid, "uuid4", lambda: next(draws))
    assert new_directory_id() == kafka_uuid.uuid_text(other)


def test_with_directory_id_fills_only_a_missing_id() -> None:
    meta = MetaProperties(version=1, cluster_id="c", node_id=1)
    filled = with_directory_id(meta)
    assert filled.directory_id is not None
    assert filled.cluster_id == "c"
    assert with_directory_id(filled) is filled


# --- atomic write -------------------------------------------------------------------------------------------


def test_write_leaves_no_tmp_and_ignores_a_stale_one(tmp_path: Path) -> None:
    path = tmp_path / META_PROPERTIES
    meta = MetaProperties(version=1, cluster_id="c", node_id=1)
    write_raw(tmp_file(path), "version=garbage")
    write_meta_properties(path, meta, clock=CLOCK)
    assert not tmp_file(path).exists()
    assert read_meta_properties(path) == meta


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / META_PROPERTIES
    old = MetaProperties(version=0, node_id=1)
    write_meta_properties(path, old, clock=CLOCK)

    def failing_replace(src: object, dst: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("os.replace", failing_replace)
    with pytest.raises(KafkaStorageError):
        write_meta_properties(path, MetaProperties(version=0, node_id=2), clock=CLOCK)
    monkeypatch.undo()
    assert read_meta_properties(path) == old
    assert not tmp_file(path).exists()
