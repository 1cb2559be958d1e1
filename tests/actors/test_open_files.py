"""A partition host's budget of open files: the files one open partition really holds (counted in /proc), the hosts'
size capped by the process's limit, and the soft limit raised to the hard one as the JVM raises it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from actors.open_files import FILES_PER_PARTITION, RESERVED_FILES, partitions_per_process
from actors.server.partition_log import PartitionLogActor
from tests.storage.builders import Rec, batch_bytes


def open_files_under(root: Path) -> int:
    """How many of this process's descriptors name a file under `root`."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(root))
        except OSError:
            continue
    return count


def test_an_open_partition_holds_files_per_partition_descriptors(tmp_path: Path) -> None:
    partitions = [PartitionLogActor(str(tmp_path / f"t-{index}"), {}) for index in range(3)]
    for partition in partitions:
        partition.append(batch_bytes([Rec(b"k", b"v", int(time.time() * 1000), ())]))
    assert open_files_under(tmp_path) == 3 * FILES_PER_PARTITION
    for partition in partitions:
        partition.close()
    assert open_files_under(tmp_path) == 0


def test_a_host_holds_the_configured_partitions_unless_the_open_file_limit_holds_fewer() -> None:
    assert partitions_per_process(16, 20_000) == 16
    assert partitions_per_process(10_000, 20_000) == (20_000 - RESERVED_FILES) // FILES_PER_PARTITION
    assert partitions_per_process(16, RESERVED_FILES + 8 * FILES_PER_PARTITION) == 8
    assert partitions_per_process(16, 100) == 2, "a node configured for hosts keeps hosts"
    assert partitions_per_process(1, 100) == 1, "one process per partition stays so"


def test_the_soft_limit_is_raised_to_the_hard_limit() -> None:
    script = (
        "import resource\n"
        "from actors.open_files import raise_open_file_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard) // 2, hard))\n"
        "print(raise_open_file_limit() == hard == resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.strip() == "True"
