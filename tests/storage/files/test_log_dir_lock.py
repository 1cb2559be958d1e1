"""The log-dir `.lock`: one owner at a time, in this process or another, and no stale lock after a crash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage.errors import KafkaStorageError, LogDirLockedError
from storage.file_names import LOCK_FILE
from storage.files.log_dir_lock import LogDirLock

REPO_ROOT = Path(__file__).resolve().parents[3]
# Holds the lock until stdin closes, or reports the error class it got.
CHILD = """
import sys
from pathlib import Path
from storage.errors import LogDirLockedError
from storage.files.log_dir_lock import LogDirLock
try:
    lock = LogDirLock(Path(sys.argv[1]))
except LogDirLockedError as exc:
    print("locked-out", exc.path, flush=True)
    sys.exit(3)
print("locked", flush=True)
sys.stdin.readline()
"""


def start_child(log_dir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(log_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )


def test_lock_creates_the_lock_file_and_keeps_it_after_release(tmp_path: Path) -> None:
    lock = LogDirLock(tmp_path)
    assert lock.locked
    assert lock.path == tmp_path / LOCK_FILE
    assert lock.path.exists()
    lock.release()
    assert not lock.locked
    assert lock.path.exists()


def test_second_lock_in_same_process_fails_with_kafkas_message(tmp_path: Path) -> None:
    with LogDirLock(tmp_path), pytest.raises(LogDirLockedError) as info:
        LogDirLock(tmp_path)
    assert info.value.path == str(tmp_path / LOCK_FILE)
    assert info.value.message == (
        f"Failed to acquire lock on file .lock in {tmp_path}. "
        "A Kafka instance in another process or thread is using this directory."
    )


def test_failed_attempt_does_not_disturb_the_holder(tmp_path: Path) -> None:
    holder = LogDirLock(tmp_path)
    for _ in range(3):
        with pytest.raises(LogDirLockedError):
            LogDirLock(tmp_path)
    assert holder.locked
    with pytest.raises(LogDirLockedError):
        LogDirLock(tmp_path)
    holder.release()
    LogDirLock(tmp_path).release()


def test_release_is_idempotent_and_context_manager_releases(tmp_path: Path) -> None:
    lock = LogDirLock(tmp_path)
    lock.release()
    lock.release()
    with LogDirLock(tmp_path) as inner:
        assert inner.locked
    assert not inner.locked
    LogDirLock(tmp_path).release()


def test_context_manager_releases_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), LogDirLock(tmp_path):
        raise RuntimeError("boom")
    LogDirLock(tmp_path).release()


def test_different_dirs_lock_independently(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with LogDirLock(tmp_path / "a"), LogDirLock(tmp_path / "b"):
        pass


def test_missing_dir_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaStorageError) as info:
        LogDirLock(tmp_path / "missing")
    assert not isinstance(info.value, LogDirLockedError)
    assert info.value.path == str(tmp_path / "missing" / LOCK_FILE)


@pytest.mark.timeout(60)
def test_lock_held_by_another_process_blocks_us_until_it_exits(tmp_path: Path) -> None:
    child = start_child(tmp_path)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(LogDirLockedError):
            LogDirLock(tmp_path)
        child.stdin.close()
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
    LogDirLock(tmp_path).release()


@pytest.mark.timeout(60)
def test_lock_held_here_blocks_another_process(tmp_path: Path) -> None:
    with LogDirLock(tmp_path):
        child = start_child(tmp_path)
        output, _ = child.communicate(timeout=30)
    assert child.returncode == 3
    assert output.split() == ["locked-out", str(tmp_path / LOCK_FILE)]


@pytest.mark.timeout(60)
def test_killed_owner_leaves_no_stale_lock(tmp_path: Path) -> None:
    child = start_child(tmp_path)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(LogDirLockedError):
            LogDirLock(tmp_path)
    finally:
        child.kill()
        child.wait()
    LogDirLock(tmp_path).release()


# A Java Kafka broker locks `.lock` with `FileChannel.tryLock()`, which on Linux is a POSIX record lock
# (fcntl F_SETLK) over the whole file; `fcntl.lockf` takes exactly that lock.
JAVA_STYLE_HOLDER = """
import fcntl
import os
import sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    print("locked-out", flush=True)
    sys.exit(3)
print("locked", flush=True)
sys.stdin.readline()
"""


def start_java_style_holder(lock_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", JAVA_STYLE_HOLDER, str(lock_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.timeout(60)
def test_record_lock_held_by_a_java_broker_makes_us_refuse_the_dir(tmp_path: Path) -> None:
    holder = start_java_style_holder(tmp_path / LOCK_FILE)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LogDirLockedError) as info:
            LogDirLock(tmp_path)
        assert info.value.message == (
            f"Failed to acquire lock on file .lock in {tmp_path}. "
            "A Kafka instance in another process or thread is using this directory."
        )
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
        holder.wait()
    LogDirLock(tmp_path).release()


@pytest.mark.timeout(60)
def test_lock_held_here_makes_a_java_broker_fail_its_record_lock(tmp_path: Path) -> None:
    with LogDirLock(tmp_path):
        holder = start_java_style_holder(tmp_path / LOCK_FILE)
        output, _ = holder.communicate(timeout=30)
    assert holder.returncode == 3
    assert output.strip() == "locked-out"


@pytest.mark.timeout(60)
def test_failed_attempt_in_this_process_keeps_the_record_lock_of_the_holder(tmp_path: Path) -> None:
    """A POSIX record lock dies when its process closes any descriptor of the file; ours must not."""
    with LogDirLock(tmp_path):
        with pytest.raises(LogDirLockedError):
            LogDirLock(tmp_path)
        holder = start_java_style_holder(tmp_path / LOCK_FILE)
        output, _ = holder.communicate(timeout=30)
    assert holder.returncode == 3
    assert output.strip() == "locked-out"
