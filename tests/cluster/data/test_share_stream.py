"""`share_stream` on a real broker and a real local Ray: a share group read as Datasets of work, each batch
accepted once the caller is done with it, released (delivered again with a higher delivery count) when its work
failed, rejected for good when poisoned; two streams of one group share the records of one partition, each record
done exactly once. The oracle is what was produced."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
import ray

from actors.calls import call, controller
from actors.clients.admin import Admin
from actors.clients.producer import Producer
from cluster.data import read_topic, share_stream, write_topic
from storage.errors import InvalidConfigError, InvalidRequestError

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")]

DEADLINE_S = 60.0
SCHEMA = pa.schema([("n", pa.int64())])


@pytest.fixture(scope="module")
def broker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Any:
    ray.data.DataContext.get_current().enable_progress_bars = False
    return start_test_broker(log_dirs_count=1)[0]


def _topic_and_group(name: str, partitions: int = 1) -> tuple[str, str]:
    """A topic and a share group reading it from the earliest offset (`share.auto.offset.reset`)."""
    Admin().create_topic(name, partitions=partitions)
    group = f"{name}-workers"
    call(controller().set_group_config.remote(group, {"share.auto.offset.reset": "earliest"}, False))
    return name, group


def _produce(topic: str, numbers: range) -> None:
    """One batch a record: a share fetch acquires whole batches, so `max_records` then bounds a batch's rows."""
    with Producer() as producer:
        for n in numbers:
            producer.send(topic, f'{{"n": {n}}}'.encode()).result()


def test_batches_are_accepted_when_done_released_when_failed_and_rejected_when_poisoned(broker: Any) -> None:
    topic, group = _topic_and_group("share-work")
    _produce(topic, range(30))
    stream = share_stream(topic, group_id=group, value_format="json", value_schema=SCHEMA, max_records=10)
    first = next(stream)
    assert first.schema().names == [
        "key", "n", "topic", "partition", "offset", "timestamp", "timestampType", "headers", "delivery_count",
    ]  # fmt: skip
    rows = first.take_all()
    assert rows and all(row["delivery_count"] == 1 for row in rows)
    failed = sorted(row["n"] for row in rows)
    stream.release()  # the work failed: its records come back, one delivery later
    redelivered: dict[int, int] = {}
    done: list[int] = []
    poisoned: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(done) + len(poisoned) < 30 and time.monotonic() < deadline:
        batch = next(stream).take_all()
        for row in batch:
            if row["n"] in failed:
                redelivered[row["n"]] = row["delivery_count"]
        if any(row["n"] == 7 for row in batch):
            poisoned.extend(row["n"] for row in batch)
            stream.reject()
        else:
            done.extend(row["n"] for row in batch)  # accepted by the next `next`, the last by `commit`
    stream.commit()
    stream.close()
    assert sorted(done + poisoned) == list(range(30)), "every record done once"
    assert redelivered == dict.fromkeys(failed, 2)
    # Nothing is left for the group: a stream of it finds no record.
    with share_stream(topic, group_id=group, poll_timeout_s=0.2, idle_timeout_s=1.0) as again:
        assert list(again) == []


def test_two_streams_share_one_partition_and_write_every_record_once_downstream(broker: Any) -> None:
    topic, group = _topic_and_group("share-jobs")
    Admin().create_topic("share-results", partitions=1)
    _produce(topic, range(200))
    failures: list[BaseException] = []

    def work(index: int) -> None:
        try:
            with share_stream(
                topic,
                group_id=group,
                value_format="json",
                value_schema=SCHEMA,
                max_records=20,
                poll_timeout_s=0.2,
                idle_timeout_s=3.0,
            ) as stream:
                for batch in stream:
                    squares = batch.map(lambda row: {"n": row["n"], "square": row["n"] ** 2})
                    write_topic(squares.select_columns(["square"]), "share-results", value_format="json")
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(index,)) for index in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(DEADLINE_S * 2)
    assert not failures, failures
    results = read_topic("share-results", value_format="json", value_schema=pa.schema([("square", pa.int64())]))
    assert sorted(row["square"] for row in results.take_all()) == [n * n for n in range(200)]


def test_bad_options_are_refused_before_joining(broker: Any) -> None:
    with pytest.raises(InvalidConfigError, match="poll_timeout_s"):
        share_stream("share-work", group_id="g", poll_timeout_s=-1)
    with pytest.raises(InvalidConfigError, match="max_records"):
        share_stream("share-work", group_id="g", max_records=0)
    with pytest.raises(InvalidRequestError, match="columns"):
        share_stream("share-work", group_id="g", columns=["nope"])
