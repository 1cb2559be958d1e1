"""A storage writer for the kill -9 harness (`test_storage_kill.py`): appends, rolls, retention, compaction and
checkpoint writes through the real storage code, acknowledging every append in a side file, until it is killed.

Run as `python storage_writer.py`, it is a fork server: it imports and hooks the storage code once, then for each
line `LOG_DIR ACK_FILE SEED PREALLOCATE CRASH_POINT CRASH_HIT` read on stdin it forks a writer, prints `pid PID`,
waits for it and prints `exit STATUS` (the raw wait status). Forking from a single-threaded server costs
milliseconds, where starting Python and importing the storage code costs about a second on a loaded machine; the
writer is still a process of its own that the harness kills with SIGKILL.

Acknowledged means: `Log.append` returned, and then the ack line was written to ACK_FILE with one `write(2)`
(`flush()`). The crash model is SIGKILL, a process death, not a power cut: the page cache survives, so what
any `write(2)` put there before the kill is on "disk" for the next open, and no fsync is needed for either the
log or the ack file. An append whose ack line is not in the file may or may not be in the log.

The log dir is owned by a `LogManager` (lock, meta.properties, the three offset checkpoints) with two logs:

| topic       | policy  | what the writer does                                                                 |
|-------------|---------|--------------------------------------------------------------------------------------|
| `plain`     | delete  | 1-5 record batches, unkeyed or keyed; `retention.bytes` makes retention delete       |
| `compacted` | compact | 1-5 record batches over 12 keys, some tombstones; the manager's cleaner compacts it  |
|             |         | and rewrites `cleaner-offset-checkpoint`                                             |

The ACK_FILE is JSON lines, appended to, never rewritten (the harness adds its own appends too):

| line                                               | meaning                                                       |
|----------------------------------------------------|---------------------------------------------------------------|
| `{"intent": topic, "n": N}`                        | an append of N records is about to start                      |
| `{"topic": t, "first": offset, "records": [...]}`  | acknowledged: records `[key_hex or null, value_hex or null]`  |
| `{"retention": topic, "bound": offset}`            | a retention pass starts; it cannot move the start above bound |

Phases: every phase (`append`, `roll`, `retention`, `clean`, `swap`, `checkpoint`, `flush`, `delete`) is printed
as `phase NAME` on stdout as it starts, and `ready` once the manager has loaded, so the harness can kill the
writer right then. CRASH_POINT / CRASH_HIT (or `none 0`) make the writer kill itself with SIGKILL at the
CRASH_HIT-th time it reaches that exact point (a torn append, between the renames of a swap, after a
checkpoint's `.tmp` is written and before its rename...; see `CRASH_POINTS`), printing `crash POINT` first.
Hits are counted from the fork on, so a crash point may also fire while the manager loads (a crash during
recovery).
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from storage import file_io, file_names  # noqa: E402
from storage.clock import SYSTEM_CLOCK  # noqa: E402
from storage.compaction.cleaner import Cleaner  # noqa: E402
from storage.config.cleaner_config import CleanerConfig  # noqa: E402
from storage.config.log_config import LogConfig  # noqa: E402
from storage.logdir.log_manager import LogManager  # noqa: E402
from storage.partition.log import Log  # noqa: E402
from storage.partition.producer_state import ProducerStateManager  # noqa: E402
from storage.records.file_records import FileRecords  # noqa: E402
from storage.records.record_batch import RecordBatchBuilder  # noqa: E402
from storage.segment.log_segment import LogSegment  # noqa: E402
from storage.segment.offset_index import OffsetIndex  # noqa: E402

PLAIN = "plain"
COMPACTED = "compacted"
KEYS = [f"key-{n}".encode() for n in range(12)]
# Small sizes so that a 0.1-0.4 s run rolls several segments (a batch is 80-250 bytes), writes index entries
# and lets retention and the cleaner find work.
SEGMENT_BYTES = 1200
INDEX_INTERVAL_BYTES = 200
SEGMENT_INDEX_BYTES = 1024
RETENTION_BYTES = 5000

CRASH_POINTS = (
    "append-torn",
    "append-written",
    "index-append",
    "roll-start",
    "roll-inactive",
    "roll-snapshot",
    "retention-renamed",
    "delete-files",
    "clean-into",
    "swap-start",
    "swap-cleaned-renamed",
    "swap-final-renamed",
    "checkpoint-tmp",
    "checkpoint-renamed",
    "flush",
)


def topic_configs(preallocate: bool) -> dict[str, LogConfig]:
    common: dict[str, Any] = {
        "segment_bytes": SEGMENT_BYTES,
        "index_interval_bytes": INDEX_INTERVAL_BYTES,
        "segment_index_bytes": SEGMENT_INDEX_BYTES,
        "preallocate": preallocate,
        "file_delete_delay_ms": 0,
    }
    return {
        PLAIN: LogConfig(retention_bytes=RETENTION_BYTES, **common),
        COMPACTED: LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.01, delete_retention_ms=0, **common),
    }


def cleaner_config() -> CleanerConfig:
    return CleanerConfig(log_cleaner_dedupe_buffer_size=2 * 1024 * 1024, log_cleaner_backoff_ms=0)


class CrashInjector:
    """Counts the hits of `point` and kills the process at the `hit`-th; prints every phase it passes."""

    def __init__(self, point: str, hit: int, out: TextIO) -> None:
        self.point = point
        self.hit = hit
        self.count = 0
        self.out = out

    def phase(self, name: str) -> None:
        self.out.write(f"phase {name}\n")
        self.out.flush()

    def reached(self, point: str) -> bool:
        """True when `point` is the crash point and this is its chosen hit."""
        if point != self.point:
            return False
        self.count += 1
        return self.count == self.hit

    def crash(self) -> None:
        self.out.write(f"crash {self.point}\n")
        self.out.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def at(self, point: str) -> None:
        if self.reached(point):
            self.crash()


def wrap(cls: type, name: str, before: Callable[..., None] | None, after: Callable[..., None] | None) -> None:
    """Replaces `cls.name` by a wrapper calling `before(*args)` and `after(*args)` around the original."""
    original = getattr(cls, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(*args, **kwargs)
        result = original(*args, **kwargs)
        if after is not None:
            after(*args, **kwargs)
        return result

    setattr(cls, name, wrapper)


def install_hooks(injector: CrashInjector) -> None:
    at = injector.at
    original_append = FileRecords.append

    def file_append(self: FileRecords, data: Any) -> int:
        whole = bytes(data) if isinstance(data, bytes | bytearray | memoryview) else b"".join(data)
        if injector.reached("append-torn") and len(whole) > 1:
            # A SIGKILL during write(2) can leave a prefix of the bytes in the page cache (Linux stops copying
            # at a page boundary when a fatal signal is pending); any prefix is possible here.
            original_append(self, whole[: random.randrange(1, len(whole))])
            injector.crash()
        written = original_append(self, data)
        at("append-written")
        return written

    FileRecords.append = file_append  # type: ignore[method-assign]
    wrap(OffsetIndex, "append", None, lambda *a, **k: at("index-append"))
    wrap(Log, "roll", lambda *a, **k: (injector.phase("roll"), at("roll-start")), None)
    wrap(LogSegment, "on_become_inactive_segment", None, lambda *a, **k: at("roll-inactive"))
    wrap(ProducerStateManager, "write_snapshot", lambda *a, **k: at("roll-snapshot"), None)

    def suffix_changed(segment: LogSegment, old: str, new: str) -> None:
        if new == file_names.DELETED_SUFFIX:
            at("retention-renamed")
        elif old == file_names.CLEANED_SUFFIX:
            at("swap-cleaned-renamed")
        elif old == file_names.SWAP_SUFFIX:
            at("swap-final-renamed")

    wrap(LogSegment, "change_file_suffixes", None, suffix_changed)
    wrap(LogSegment, "delete_files", lambda *a, **k: (injector.phase("delete"), at("delete-files")), None)
    wrap(Cleaner, "_clean_into", None, lambda *a, **k: at("clean-into"))
    wrap(Log, "replace_segments", lambda *a, **k: (injector.phase("swap"), at("swap-start")), None)
    wrap(Log, "flush", lambda *a, **k: (injector.phase("flush"), at("flush")), None)
    original_replace = os.replace

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        is_tmp = str(src).endswith(file_names.TMP_SUFFIX)
        if is_tmp:
            injector.phase("checkpoint")
            at("checkpoint-tmp")
        original_replace(src, dst, **kwargs)
        if is_tmp:
            at("checkpoint-renamed")

    file_io.os.replace = replace  # type: ignore[assignment]


def build_batch(rng: random.Random, topic: str, run_id: str, seq: int) -> tuple[bytes, list[list[str | None]]]:
    builder = RecordBatchBuilder()
    records: list[list[str | None]] = []
    now_ms = SYSTEM_CLOCK.milliseconds()
    for n in range(rng.randint(1, 5)):
        value: bytes | None = f"{run_id}-{seq}-{n}-{'x' * rng.randint(0, 40)}".encode()
        if topic == COMPACTED:
            key: bytes | None = rng.choice(KEYS)
            if rng.random() < 0.1:
                value = None
        else:
            key = rng.choice([None, *KEYS])
        builder.append(key, value, timestamp=now_ms + n)
        records.append([key.hex() if key is not None else None, value.hex() if value is not None else None])
    return builder.build(), records


def write_line(acks: TextIO, entry: dict[str, Any]) -> None:
    """One JSON line, handed to the kernel at once (one write(2) per flush)."""
    acks.write(json.dumps(entry) + "\n")
    acks.flush()


def run(log_dir: Path, ack_path: Path, seed: int, preallocate: bool, injector: CrashInjector) -> None:
    rng = random.Random(seed)
    run_id = f"{seed:x}"
    manager = LogManager(
        [log_dir], topic_configs=topic_configs(preallocate), file_delete_delay_ms=0, cleaner_config=cleaner_config()
    )
    manager.startup()
    logs = {topic: manager.get_or_create_log(topic, 0) for topic in (PLAIN, COMPACTED)}
    injector.phase("ready")
    with open(ack_path, "a", encoding="utf-8") as acks:
        # Bounded: the harness kills the writer long before; if it does not, the writer ends by itself.
        for seq in range(100_000):
            choice = rng.random()
            if choice < 0.72:
                topic = PLAIN if rng.random() < 0.5 else COMPACTED
                data, records = build_batch(rng, topic, run_id, seq)
                write_line(acks, {"intent": topic, "n": len(records)})
                injector.phase("append")
                info = logs[topic].append(data)
                write_line(acks, {"topic": topic, "first": info.first_offset, "records": records})
            elif choice < 0.80:
                log = logs[PLAIN]
                write_line(acks, {"retention": PLAIN, "bound": log.active_segment.base_offset})
                injector.phase("retention")
                log.delete_old_segments()
            elif choice < 0.88:
                injector.phase("clean")
                manager.run_cleaner()
            elif choice < 0.96:
                injector.phase("checkpoint")
                manager.checkpoint_recovery_points()
                manager.checkpoint_log_start_offsets()
                manager.checkpoint_high_watermarks()
            else:
                logs[rng.choice([PLAIN, COMPACTED])].flush()
    manager.shutdown()


def serve(commands: TextIO, out: TextIO) -> None:
    injector = CrashInjector("none", 0, out)
    install_hooks(injector)
    for line in commands:
        log_dir, ack_path, seed, preallocate, point, hit = line.split()
        out.flush()
        pid = os.fork()
        if pid == 0:
            injector.point, injector.hit = point, int(hit)
            status = 0
            try:
                run(Path(log_dir), Path(ack_path), int(seed), preallocate == "1", injector)
            except BaseException:
                traceback.print_exc()
                status = 1
            out.flush()
            sys.stderr.flush()
            os._exit(status)
        out.write(f"pid {pid}\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(f"exit {status}\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
