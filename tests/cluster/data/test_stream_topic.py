"""`stream_topic` on a real broker and a real local Ray: successive Datasets, each from where the last ended to
the offsets latest when it was planned, the group's offsets committed once the caller is done with a batch, so a
stream of the same group resumes after the last committed batch and re-reads one that was not (at least once).
The oracle is what was produced, in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import ray

from actors.clients.admin import Admin
from actors.clients.consumer import Consumer
from actors.clients.producer import Producer
from cluster.data import stream_topic
from storage.errors import InvalidRequestError

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")]


@pytest.fixture(scope="module")
def broker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Any:
    ray.data.DataContext.get_current().enable_progress_bars = False
    return start_test_broker(log_dirs_count=1)[0]


def produce(topic: str, first: int, count: int) -> None:
    with Producer() as producer:
        producer.send_many(topic, [f"{first + i}".encode() for i in range(count)]).result()


def values(dataset: Any) -> list[int]:
    return sorted(int(row["value"]) for row in dataset.take_all())


def committed(group: str, topic: str, partitions: int) -> dict[int, int | None]:
    with Consumer(group_id=group) as consumer:
        return {p: consumer.committed((topic, p)) for p in range(partitions)}


def test_batches_follow_the_topic_and_commit_when_the_caller_asks_for_the_next(broker: Any) -> None:
    Admin().create_topic("live", partitions=2)
    produce("live", 0, 100)
    stream = stream_topic("live", group_id="g1", interval_s=0.1, columns=["value"])
    first = next(stream)
    assert values(first) == list(range(100))
    assert committed("g1", "live", 2) == {0: None, 1: None}, "nothing is committed while the batch is processed"
    later = threading.Timer(0.5, produce, args=("live", 100, 50))
    later.start()
    second = next(stream)  # waits for the records produced meanwhile
    later.join()
    # The batch ends at the offsets latest when it was planned: some or all of the 50 new records, in order.
    assert values(second) and values(second) == list(range(100, 100 + len(values(second))))
    assert stream.batch is not None and stream.batch.index == 1
    assert sum(v for v in committed("g1", "live", 2).values() if v is not None) == 100, "the first batch"
    seen = values(second)
    stream.close()  # second not committed: processed, say, but the caller failed before finishing

    with stream_topic("live", group_id="g1", interval_s=0.1, columns=["value"], idle_timeout_s=1.0) as again:
        replayed = [values(dataset) for dataset in again]
    assert sorted(v for batch in replayed for v in batch) == list(range(100, 150)), "at least once: read again"
    assert set(seen) <= set(range(100, 150))
    assert sum(v for v in committed("g1", "live", 2).values() if v is not None) == 150, "committed on clean exit"


def test_a_group_without_offsets_starts_where_start_says_and_max_batches_ends_the_stream(broker: Any) -> None:
    Admin().create_topic("fresh", partitions=1)
    produce("fresh", 0, 30)
    stream = stream_topic("fresh", group_id="g2", start="latest", interval_s=0.05, max_batches=1)
    threading.Timer(0.3, produce, args=("fresh", 30, 5)).start()
    batches = [values(dataset) for dataset in stream]
    assert batches == [[30, 31, 32, 33, 34]]
    assert committed("g2", "fresh", 1) == {0: 35}
    with stream_topic("fresh", group_id="g2", idle_timeout_s=0.3, interval_s=0.05) as idle:
        started = time.monotonic()
        assert list(idle) == []
        assert time.monotonic() - started < 10


def test_bad_streams_are_refused(broker: Any) -> None:
    with pytest.raises(InvalidRequestError, match="group_id"):
        stream_topic("fresh", group_id="")
    with pytest.raises(InvalidRequestError, match="interval_s"):
        stream_topic("fresh", group_id="g", interval_s=-1)
    with pytest.raises(InvalidRequestError, match="start must be"):
        stream_topic("fresh", group_id="g", start=5)
