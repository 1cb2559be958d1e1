"""What a Spark Python worker does once before it reads: attach to Ray, and keep its zips' directories.

Spark's Python workers are reused across tasks, so both are paid by a worker's first task only. A worker attaches
to Ray by the GCS address the driver passes down, never by `auto`: `auto` reads `/tmp/ray/ray_current_cluster`,
which names the last cluster `ray start` made on the machine, not necessarily the one the session runs on.
"""

from __future__ import annotations

import logging
import os
import sys
import zipimport

import ray

from actors.options import NAMESPACE


def attach_worker_to_ray(address: str) -> None:
    """Attaches this Spark Python worker to Ray once (later calls are free).

    Log forwarding stays off: this process's stderr is the executor's, which Ray would publish back to the driver,
    whose output reaches the executor again (a loop that grew a worker log to 213 MB in a minute).
    """
    if ray.is_initialized():
        return
    os.environ["RAY_LOG_TO_DRIVER"] = "0"
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.ERROR)


class _StableZipImporter(zipimport.zipimporter):
    """A zip on `sys.path` whose directory is read once for the life of the process."""

    def invalidate_caches(self) -> None:
        """Keeps the directory: Spark's zips (`pyspark.zip`, py4j's) do not change while a worker runs."""


def keep_zip_directories() -> None:
    """Stops Spark's Python worker from re-reading its zips before every task.

    The worker calls `importlib.invalidate_caches()` at the start of each task, and on Python 3.10+ that makes
    every zip importer on `sys.path` read its zip's whole directory again: `pyspark.zip` (2.4 MB, ~1000
    entries). py-spy over the read tasks of 1M records (8 partitions, 4 tasks) found 23 % of the workers'
    samples there, more than fetching and decoding took together. Swapping the importers for ones that keep
    their directory makes later tasks of this (reused) worker skip it; imports from the zips still work.
    """
    for path, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            try:
                sys.path_importer_cache[path] = _StableZipImporter(path)
            except zipimport.ZipImportError:
                continue
