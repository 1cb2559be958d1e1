"""`cluster.head_state`: the state file `raybroker start` writes for `stop`."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.head_state import HeadState, forget_state, read_state, state_file, write_state


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


def test_a_written_state_reads_back_and_forgetting_removes_it(tmp_path: Path) -> None:
    assert read_state() is None
    state = HeadState(True, "10.0.0.5:6379", "session_2024_x", "ab" * 28, True, "rocksdb", "/data/rb-ray-gcs")
    write_state(state)
    assert state_file().parent.parent == tmp_path
    assert read_state() == state
    forget_state()
    assert not state_file().exists()
    assert read_state() is None
    forget_state()


def test_a_state_file_from_before_gcs_storage_reads_as_memory() -> None:
    state_file().parent.mkdir(parents=True)
    body = '{"started_head": true, "address": "a:6379", "session_name": "s", "node_id": "n", "token_auth": true}'
    state_file().write_text(body, encoding="utf-8")
    assert read_state() == HeadState(True, "a:6379", "s", "n", True, "memory", "")


@pytest.mark.parametrize("body", ["", "not json", "[]", '{"started_head": true}'])
def test_an_unreadable_state_file_reads_as_no_state(body: str) -> None:
    state_file().parent.mkdir(parents=True)
    state_file().write_text(body, encoding="utf-8")
    assert read_state() is None
