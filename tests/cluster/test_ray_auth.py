"""`cluster.ray_auth`: Ray's token is created where Ray looks for it, for its owner only, and never replaced."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from cluster.ray_auth import ensure_auth_token


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new empty home directory, as on a machine that never ran Ray, with no token variable set."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    for variable in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(variable, raising=False)
    return folder


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_fresh_home_gets_a_token_only_its_owner_can_read(home: Path) -> None:
    path = ensure_auth_token()
    assert path == home / ".ray" / "auth_token"
    token = path.read_text(encoding="ascii")
    assert len(token) == 64 and int(token, 16) >= 0
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


def test_an_existing_token_is_kept_and_narrowed_to_its_owner(home: Path) -> None:
    path = home / ".ray" / "auth_token"
    path.parent.mkdir()
    path.write_text("the-users-own-token", encoding="ascii")
    path.chmod(0o644)
    assert ensure_auth_token() == path
    assert path.read_text(encoding="ascii") == "the-users-own-token"
    assert mode(path) == 0o600


def test_two_starts_at_once_agree_on_one_token(home: Path) -> None:
    barrier = threading.Barrier(8)
    found: list[str] = []

    def start() -> None:
        barrier.wait()
        created = ensure_auth_token()
        assert created is not None
        found.append(created.read_text(encoding="ascii"))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 8 and len(set(found)) == 1
    assert sorted(os.listdir(home / ".ray")) == ["auth_token"]


def test_a_token_path_variable_is_where_the_token_goes(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = tmp_path / "secrets" / "ray-token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    assert ensure_auth_token() == named
    assert mode(named) == 0o600
    assert not (home / ".ray").exists()


@pytest.mark.parametrize(("variable", "value"), [("RAY_AUTH_TOKEN", "inline-token"), ("RAY_AUTH_MODE", "disabled")])
def test_no_file_is_written_when_the_token_is_inline_or_auth_is_off(
    home: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    assert ensure_auth_token() is None
    assert not (home / ".ray").exists()
