"""A Serve task queue's outcomes: a compacted topic keyed by task id (`task_messages.Outcome` records), written by
the workers and read by whoever asks a task's status.

`record` appends an outcome and waits until it is acknowledged by every in-sync replica (acks=all), so a task's
outcome is durable before its queue record is acknowledged. `outcome` first reads the topic up to its end as it is
when asked (so an outcome recorded before the call is seen), then answers from what it read; a task already read as
SUCCESS or FAILURE is answered without reading, as the task processor writes nothing after either (a worker skips a
task that has one; only a task whose lock expired under a worker runs twice), while a REVOKED task may still be
finished by a worker that had started it. `refresh` only catches up, and `known` only answers. The topic is created
on first use (`cleanup.policy=compact`: the latest outcome of each task stays).

The end is each partition's high watermark. Once the reader's consumer follows the partition's tail on its own node
(`actors.clients.local_tail`), it is read from the leader's high-watermark file, which the leader rewrites before it
acknowledges an append, so no call is made; otherwise it is asked of the leader's handle, which is kept across calls
and looked up again after a `BrokerNotAvailableError` (a leader that moved or restarted), as `partition_lookup` asks
of its callers. `refresh` runs once a poll on every worker and once a status query that is not answered from what
was read: `Admin.list_offsets` looks the leader up through the controller and Ray's actor directory on every call
(14 ms of a 2-core machine's time, against about 1 ms for the one call to a known leader, and none for the file;
`benchmarks/bench_serve_tasks.py`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from actors.calls import call
from actors.clients.admin import Admin
from actors.clients.broker import Broker
from actors.clients.consumer import Consumer
from actors.clients.producer import Producer
from actors.server.partition_lookup import partition_actor
from cluster.serve.task_messages import FAILURE, SUCCESS, Outcome, outcome_of
from storage.errors import BrokerNotAvailableError, RequestTimedOutError, TopicExistsError
from storage.partition.log_read import LATEST_TIMESTAMP

# Outcomes nothing is written after: answered from what was read.
ENDED_STATUSES = (SUCCESS, FAILURE)
# How long `refresh` waits for the topic to be read up to the end it saw.
CATCH_UP_TIMEOUT_S = 30.0


def ensure_topic(admin: Admin, name: str, partitions: int, replication_factor: int, config: dict[str, str]) -> None:
    """Creates the topic unless it exists."""
    with contextlib.suppress(TopicExistsError):
        admin.create_topic(name, partitions, config, replication_factor=replication_factor)


class TaskResults:
    """The outcomes of one queue's tasks (see the module docstring); thread-safe."""

    def __init__(self, broker: Broker, topic: str, replication_factor: int) -> None:
        self.topic = topic
        ensure_topic(Admin(broker), topic, 1, replication_factor, {"cleanup.policy": "compact"})
        self._producer = Producer(broker, linger_ms=0)
        self._consumer = Consumer(broker, auto_offset_reset="earliest")
        self._partitions = sorted(broker.topic(topic).partitions)
        self._consumer.assign([(topic, partition) for partition in self._partitions])
        self._leaders: dict[int, Any] = {}
        self._outcomes: dict[str, Outcome] = {}
        self._lock = threading.Lock()

    def record(self, task_id: str, outcome: Outcome) -> None:
        """Appends `outcome` for `task_id` and waits until it is durable; `TypeError` if its result is no JSON."""
        value = outcome.value()
        self._producer.send(self.topic, value=value, key=task_id.encode()).result(CATCH_UP_TIMEOUT_S)
        with self._lock:
            self._outcomes[task_id] = outcome

    def outcome(self, task_id: str) -> Outcome | None:
        """The task's latest outcome, None while it has none (PENDING)."""
        read = self.known(task_id)
        if read is not None and read.status in ENDED_STATUSES:
            return read
        self.refresh()
        return self.known(task_id)

    def known(self, task_id: str) -> Outcome | None:
        """The task's latest outcome as far as the topic was read (by `outcome`, `refresh` or `record`)."""
        with self._lock:
            return self._outcomes.get(task_id)

    def refresh(self) -> None:
        """Reads the topic up to the end it has now."""
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        with self._lock:
            ends = {partition: self._end_offset(partition) for partition in self._partitions}
            while any(self._consumer.position((self.topic, partition)) < end for partition, end in ends.items()):
                if time.monotonic() > deadline:
                    raise RequestTimedOutError(f"{self.topic} was not read up to {ends} within {CATCH_UP_TIMEOUT_S} s")
                for record in self._consumer.poll(timeout_ms=100):
                    outcome = outcome_of(record.value)
                    if outcome is not None and record.key is not None:
                        self._outcomes[record.key.decode(errors="replace")] = outcome

    def _end_offset(self, partition: int) -> int:
        """The partition's high watermark: from the high-watermark file of its leader on this node once the consumer
        follows it there, else from its leader's kept handle, looked up once more if that one fails."""
        published = self._consumer.published_high_watermark((self.topic, partition))
        if published is not None:
            return published
        handle = self._leaders.get(partition)
        if handle is not None:
            try:
                return self._high_watermark(handle)
            except BrokerNotAvailableError:
                self._leaders.pop(partition, None)
        handle = partition_actor(self.topic, partition)
        end = self._high_watermark(handle)
        self._leaders[partition] = handle
        return end

    @staticmethod
    def _high_watermark(handle: Any) -> int:
        found = call(handle.list_offset.remote(LATEST_TIMESTAMP))
        return 0 if found is None else int(found.offset)

    def close(self) -> None:
        self._producer.close()
        self._consumer.close()
