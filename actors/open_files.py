"""How many partitions one partition host may hold within its process's limit of open files (`RLIMIT_NOFILE`).

A partition keeps five files open however small it is: its folder's `.lock`, its active segment's `.log`, `.index`
and `.timeindex` (Python's `mmap` keeps a descriptor of each file it maps, where Kafka's JVM closes it once mapped)
and its high-watermark `.state` file; each older segment keeps its `.log` open too, and its indexes while they are
mapped (a rolled segment's `.timeindex` stays mapped). A host of `log.partitions.per.process` partitions thus needs
five times as many descriptors and more, beside the ~100 of the Ray worker itself: past the limit its partitions
fail to open with "Too many open files".

`raise_open_file_limit()` raises the process's soft limit to its hard one, as the JVM does when it starts
(`-XX:+MaxFDLimit`, on by default), and answers the limit then. `partitions_per_process` is what a node's log
manager places in one host: `log.partitions.per.process`, or fewer when the limit holds fewer (at least 2, so a
node configured for hosts keeps hosts).
"""

from __future__ import annotations

import resource

# The files a partition keeps open: `.lock`, `.log`, `.index`, `.timeindex` and `.state`.
FILES_PER_PARTITION = 5
# What a partition host's process keeps open besides its partitions (Ray's sockets, pipes and logs: ~100 measured),
# with room for the older segments' files.
RESERVED_FILES = 256
MIN_HOSTED = 2


def raise_open_file_limit() -> int:
    """Raises this process's soft limit of open files to its hard limit (as the JVM does); the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or hard == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft
    return hard


def partitions_per_process(configured: int, open_files_limit: int) -> int:
    """The partitions one host may hold: `configured`, or the most whose files fit `open_files_limit` beside
    `RESERVED_FILES` if fewer (never below `MIN_HOSTED` when `configured` is at least that)."""
    fitting = max(MIN_HOSTED, (open_files_limit - RESERVED_FILES) // FILES_PER_PARTITION)
    return min(configured, fitting)
