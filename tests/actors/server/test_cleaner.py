"""Cleaner actors on a real local Ray: a compacted partition of a partition host is compacted by the node's cleaner
actor, in a process of its own, while appends to the host's partitions go on; what is read back matches a dict
of the latest value per key."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.calls import call, get_actor
from actors.clients.broker import Broker
from actors.options import cleaner_name
from storage import file_names
from storage.files.checkpoint_file import OffsetCheckpointFile
from tests.actors.support import now_ms, wait_for
from tests.storage.builders import Rec, as_recs, batch_bytes, kafka_decode

pytestmark = pytest.mark.ray

StartBroker = Callable[..., tuple[Broker, list[Path]]]
KEYS = 7


def read_all(handle: Any) -> list[Rec]:
    start, high_watermark, _ = call(handle.offsets.remote(), timeout_s=60)
    out: list[Rec] = []
    offset = start
    while offset < high_watermark:
        chunk = [r for r in kafka_decode(call(handle.read.remote(offset, 4096), timeout_s=60)) if r.offset >= offset]
        assert chunk
        out.extend(as_recs(chunk))
        offset = chunk[-1].offset + 1
    return out


def alive_pids(class_name: str) -> dict[str, int]:
    """Actor name -> pid of the ALIVE actors of `class_name`, from the GCS actor table."""
    return {
        entry["Name"]: entry["Pid"]
        for entry in ray._private.state.actors().values()
        if entry["State"] == "ALIVE" and entry["ActorClassName"] == class_name
    }


def test_a_hosted_compacted_partition_is_compacted_by_the_cleaner_actor_while_appends_go_on(
    start_test_broker: StartBroker,
) -> None:
    client, log_dirs = start_test_broker(log_dirs_count=1, log_partitions_per_process="4")
    compact = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.1"}
    call(client.controller.create_topic.remote("keyed", 1, compact))
    call(client.controller.create_topic.remote("plain", 1))
    keyed, plain = client.partition("keyed", 0), client.partition("plain", 0)
    node = ray.get_runtime_context().get_node_id()
    cleaner = get_actor(cleaner_name(node, 0))
    assert call(keyed.state.remote()).pid == call(plain.state.remote()).pid, "both partitions in one host"

    latest: dict[bytes | None, bytes | None] = {}
    written = 0
    for index in range(150):
        batch = [Rec(b"k%d" % ((index * 3 + i) % KEYS), b"v%d-%d" % (index, i), now_ms()) for i in range(3)]
        call(keyed.append.remote(batch_bytes(batch)), timeout_s=60)
        latest.update((record.key, record.value) for record in batch)
        written += len(batch)

    plain_offsets: list[int] = []
    stop = threading.Event()

    def append_plain() -> None:
        index = 0
        while not stop.is_set():
            info = call(plain.append.remote(batch_bytes([Rec(None, b"p%d" % index, now_ms())])), timeout_s=60)
            plain_offsets.append(info.first_offset)
            index += 1

    appender = threading.Thread(target=append_plain)
    appender.start()
    try:

        def compacted() -> bool:
            path = log_dirs[0] / file_names.CLEANER_OFFSET_CHECKPOINT
            return path.exists() and OffsetCheckpointFile(path, read_only=True).read().get(("keyed", 0), 0) > 0

        wait_for(compacted, what="a pass over the hosted compacted partition")
    finally:
        stop.set()
        appender.join(timeout=60)

    statistics = call(cleaner.statistics.remote())
    assert statistics.passes >= 1 and statistics.bytes_written < statistics.bytes_read
    host_pid = call(keyed.state.remote()).pid
    assert alive_pids("CleanerActor")[cleaner_name(node, 0)] != host_pid
    survivors = read_all(keyed)
    assert len(survivors) < written
    assert {record.key: record.value for record in survivors} == latest
    assert call(keyed.offsets.remote())[2] == written
    assert plain_offsets == list(range(len(plain_offsets))) and plain_offsets
    assert [record.value for record in read_all(plain)] == [b"p%d" % index for index in range(len(plain_offsets))]
