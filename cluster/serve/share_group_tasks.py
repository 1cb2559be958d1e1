"""Ray Serve's asynchronous inference on raybroker's share groups: `RaybrokerTaskProcessorAdapter`, a Serve
`TaskProcessorAdapter` (as Ray's Celery and TaskIQ adapters are), so `@task_consumer` / `@task_handler` deployments
take their tasks from a raybroker topic instead of Redis or RabbitMQ.

```python
config = TaskProcessorConfig(
    queue_name="inference",
    adapter=RaybrokerTaskProcessorAdapter,
    adapter_config=RaybrokerAdapterConfig(),
    max_retries=3,
    failed_task_queue_name="inference-failed",
)
```

- The queue is a topic (`queue_name`, created with `partitions` and `replication_factor` if missing); a task is one
  record (`task_messages.Task`, JSON keyed by its id). `enqueue_task_sync` appends it (acks=all) and answers PENDING.
- Each replica runs `consumer_concurrency` workers, each a `ShareConsumer` of one share group (`group_id`, default
  `serve-<queue_name>`) with explicit acknowledgement, so every replica of the deployment shares the queue's
  partitions and each task goes to one worker at a time, locked for the group's `share.record.lock.duration.ms`
  (a handler must finish within it, or its task goes to another worker too). A worker acquires
  `max_tasks_per_poll` tasks at a time (1 by default, so an idle worker is never left waiting behind a busy one's
  batch; more amortize the fetches of short tasks; a soft limit: a batch that several tasks were produced in is
  acquired whole).
- A handler that returns: its result goes to the results topic (`<queue_name>-results`, compacted, see
  `task_results`) as SUCCESS, then the task is ACCEPTed. A handler that raises: the task is RELEASEd and delivered
  again (its delivery count one higher) until it has been tried `max_retries` + 1 times or the group's
  `group.share.delivery.count.limit` is reached; then its outcome is FAILURE and the task goes to
  `failed_task_queue_name` (then ACCEPTed), or is REJECTed (archived) when there is none. A record that is no task or
  names no registered handler goes to `unprocessable_task_queue_name` the same way, without retries.
- A worker's acknowledgements go with its next poll's fetch (one call; `close` sends the last ones), and one
  refused (the task's lock expired and another worker took it) is logged.
- A worker (or its replica) that dies holds its tasks until their locks expire; they are then delivered to another
  worker. A task whose outcome is already recorded (its worker died between recording it and acknowledging it, or
  it was cancelled) is acknowledged without running again.
- `get_task_status_sync` answers the task's outcome (PENDING until it has one); `cancel_task_sync` records REVOKED,
  so a worker that has not started the task acknowledges it without running it.
- `get_metrics_sync` counts this replica's tasks (succeeded, retried, failed, unprocessable, skipped) and gives the
  queue's backlog (`backlog_policy.queue_backlog`, which `backlog_policy.ShareGroupBacklogPolicy` scales on);
  `health_check_sync` says whether each worker thread runs.
- Each `*_sync` method has its `*_async` twin for callers on an event loop (the same call in a thread).
Handlers may be coroutine functions: a worker runs each in its own event loop. Task arguments, results and errors
are JSON; nothing a producer wrote is unpickled.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field
from ray.serve.schema import TaskProcessorAdapter, TaskProcessorConfig, TaskResult

from actors.clients.admin import Admin
from actors.clients.broker import Broker
from actors.clients.producer import Producer
from actors.clients.share_consumer import ShareConsumer, ShareRecord
from actors.core.shares.acknowledgements import AcknowledgeType
from cluster.serve.backlog_policy import queue_backlog
from cluster.serve.task_messages import (
    FAILURE,
    FINAL_STATUSES,
    PENDING,
    REVOKED,
    SUCCESS,
    Outcome,
    Task,
    UnprocessableTaskError,
    task_of,
)
from cluster.serve.task_results import TaskResults, ensure_topic
from storage.errors import InvalidConfigError

logger = logging.getLogger(__name__)

# How long a worker's poll waits for tasks before it looks at its stop flag again.
POLL_TIMEOUT_MS = 200
# How long `enqueue_task_sync` waits for the queue to acknowledge a task.
ENQUEUE_TIMEOUT_S = 30.0


class RaybrokerAdapterConfig(BaseModel):
    """Where the queue lives on raybroker (`TaskProcessorConfig.adapter_config` of `RaybrokerTaskProcessorAdapter`)."""

    group_id: str | None = Field(default=None, description="the share group of the workers; serve-<queue_name>")
    partitions: int = Field(default=1, ge=1, description="partitions of the queue topic when it is created")
    replication_factor: int = Field(default=1, ge=1, description="replicas of the topics the adapter creates")
    results_topic: str | None = Field(default=None, description="the outcomes' topic; <queue_name>-results")
    max_tasks_per_poll: int = Field(
        default=1, ge=1, description="the tasks a worker acquires at once (its share consumer's max_poll_records)"
    )


class RaybrokerTaskProcessorAdapter(TaskProcessorAdapter):
    """A Serve task processor over raybroker's share groups; see the module docstring."""

    def __init__(self, config: TaskProcessorConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(config.adapter_config, RaybrokerAdapterConfig):
            raise InvalidConfigError("TaskProcessorConfig.adapter_config must be a RaybrokerAdapterConfig")
        max_retries = config.max_retries if config.max_retries is not None else 0
        if max_retries < 0:
            raise InvalidConfigError(f"max_retries must be >= 0, got {max_retries}")
        self._config = config
        self._adapter_config: RaybrokerAdapterConfig = config.adapter_config
        self._max_retries = max_retries
        self._group_id = self._adapter_config.group_id or f"serve-{config.queue_name}"
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._workers: list[threading.Thread] = []
        self._stop = threading.Event()
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self._concurrency = 1
        self._broker: Broker | None = None
        self._producer: Producer | None = None
        self._results: TaskResults | None = None

    # --- set-up ----------------------------------------------------------------------------------

    def initialize(self, consumer_concurrency: int = 1) -> None:
        """Creates the queue, the results topic and the dead-letter topics if missing."""
        if consumer_concurrency < 1:
            raise InvalidConfigError(f"consumer_concurrency must be >= 1, got {consumer_concurrency}")
        self._concurrency = consumer_concurrency
        self._broker = Broker.connect()
        admin = Admin(self._broker)
        replicas = self._adapter_config.replication_factor
        ensure_topic(admin, self._config.queue_name, self._adapter_config.partitions, replicas, {})
        for dead_letters in (self._config.failed_task_queue_name, self._config.unprocessable_task_queue_name):
            if dead_letters:
                ensure_topic(admin, dead_letters, 1, replicas, {})
        results_topic = self._adapter_config.results_topic or f"{self._config.queue_name}-results"
        self._results = TaskResults(self._broker, results_topic, replicas)
        self._producer = Producer(self._broker, linger_ms=0)

    def register_task_handle(self, func: Callable[..., Any], name: str | None = None) -> None:
        """Registers `func` as the handler of tasks named `name` (default: the function's name)."""
        self._handlers[name or func.__name__] = func

    # --- the producer's side ---------------------------------------------------------------------

    def enqueue_task_sync(
        self, task_name: str, args: Any | None = None, kwargs: Any | None = None, **options: Any
    ) -> TaskResult:
        """Appends the task to the queue (acks=all) and answers it PENDING; arguments must be JSON."""
        if options:
            raise InvalidConfigError(f"enqueue options are not served: {sorted(options)}")
        task = Task(str(uuid.uuid4()), task_name, list(args or []), dict(kwargs or {}), time.time())
        self._ready_producer().send(self._config.queue_name, value=task.value(), key=task.task_id.encode()).result(
            ENQUEUE_TIMEOUT_S
        )
        return TaskResult(id=task.task_id, status=PENDING, created_at=task.created_at, result=None)

    def get_task_status_sync(self, task_id: str) -> TaskResult:
        """The task's outcome: SUCCESS with its result, FAILURE with its error, REVOKED, or PENDING."""
        outcome = self._ready_results().outcome(task_id)
        if outcome is None:
            return TaskResult(id=task_id, status=PENDING, result=None)
        return TaskResult(
            id=task_id,
            status=outcome.status,
            created_at=None,
            result=outcome.result if outcome.error is None else outcome.error,
        )

    def cancel_task_sync(self, task_id: str) -> None:
        """Records the task REVOKED unless it already has an outcome: a worker that gets it later skips it."""
        results = self._ready_results()
        if results.outcome(task_id) is None:
            results.record(task_id, Outcome(REVOKED, finished_at=time.time()))

    # --- the same, for callers on an event loop: each a thread of the default executor, as every call above
    # waits on Ray calls and sockets ---------------------------------------------------------------------

    async def enqueue_task_async(
        self, task_name: str, args: Any | None = None, kwargs: Any | None = None, **options: Any
    ) -> TaskResult:
        """`enqueue_task_sync`, off the event loop."""
        return await asyncio.to_thread(self.enqueue_task_sync, task_name, args, kwargs, **options)

    async def get_task_status_async(self, task_id: str) -> TaskResult:
        """`get_task_status_sync`, off the event loop."""
        return await asyncio.to_thread(self.get_task_status_sync, task_id)

    async def cancel_task_async(self, task_id: str) -> None:
        """`cancel_task_sync`, off the event loop."""
        await asyncio.to_thread(self.cancel_task_sync, task_id)

    async def get_metrics_async(self) -> dict[str, Any]:
        """`get_metrics_sync`, off the event loop."""
        return await asyncio.to_thread(self.get_metrics_sync)

    async def health_check_async(self) -> list[dict[str, Any]]:
        """`health_check_sync`, off the event loop."""
        return await asyncio.to_thread(self.health_check_sync)

    # --- the workers -----------------------------------------------------------------------------

    def start_consumer(self, **kwargs: Any) -> None:
        """Starts `consumer_concurrency` worker threads, each a member of the queue's share group."""
        if any(worker.is_alive() for worker in self._workers):
            return
        self._stop.clear()
        self._workers = [
            threading.Thread(target=self._work, name=f"raybroker-task-worker-{index}", daemon=True)
            for index in range(self._concurrency)
        ]
        for worker in self._workers:
            worker.start()

    def stop_consumer(self, timeout: float = 10.0) -> None:
        """Stops the workers: each acknowledges what it finished, releases what it holds and leaves the group."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                logger.warning("%s did not stop within %s s", worker.name, timeout)

    def get_metrics_sync(self) -> dict[str, Any]:
        """This replica's task counts and its queue."""
        with self._counts_lock:
            counts = dict(self._counts)
        backlog = queue_backlog(self._ready_broker(), self._config.queue_name, self._group_id)
        return {
            "queue": self._config.queue_name,
            "group_id": self._group_id,
            "workers": self._concurrency,
            "backlog": backlog,
            **counts,
        }

    def health_check_sync(self) -> list[dict[str, Any]]:
        """One entry per worker thread: `ok` while it runs."""
        return [{worker.name: {"ok": "pong" if worker.is_alive() else "stopped"}} for worker in self._workers]

    def _work(self) -> None:
        consumer = ShareConsumer(
            self._group_id,
            self._broker,
            acknowledgement_mode="explicit",
            max_poll_records=self._adapter_config.max_tasks_per_poll,
        )
        try:
            consumer.subscribe([self._config.queue_name])
            while not self._stop.is_set():
                records = consumer.poll(POLL_TIMEOUT_MS)
                if not records:
                    continue
                self._ready_results().refresh()
                for record in records:
                    consumer.acknowledge(record, self._run(record, consumer.delivery_count_limit()))
        except Exception:
            logger.exception("task worker %s stopped", threading.current_thread().name)
            raise
        finally:
            consumer.close()

    def _run(self, record: ShareRecord, delivery_count_limit: int) -> AcknowledgeType:
        """Runs the record's task and says how to acknowledge it (see the module docstring)."""
        results = self._ready_results()
        try:
            task = task_of(record.key, record.value)
            handler = self._handlers.get(task.name)
            if handler is None:
                raise UnprocessableTaskError(f"no handler is registered for task {task.name!r}")
        except UnprocessableTaskError as exc:
            self._count("unprocessable")
            if record.key:
                task_id = record.key.decode(errors="replace")
                results.record(task_id, Outcome(FAILURE, error=str(exc), finished_at=time.time()))
            return self._dead_letter(record, self._config.unprocessable_task_queue_name, str(exc))
        done = results.known(task.task_id)
        if done is not None and done.status in FINAL_STATUSES:
            self._count("skipped")
            return AcknowledgeType.ACCEPT
        try:
            result = handler(*task.args, **task.kwargs)
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
            results.record(task.task_id, Outcome(SUCCESS, result, finished_at=time.time()))
        except Exception as exc:  # a task's failure, whatever it is, is the task's outcome
            if record.delivery_count <= self._max_retries and record.delivery_count < delivery_count_limit:
                self._count("retried")
                return AcknowledgeType.RELEASE
            self._count("failed")
            results.record(
                task.task_id, Outcome(FAILURE, error=f"{type(exc).__name__}: {exc}", finished_at=time.time())
            )
            return self._dead_letter(record, self._config.failed_task_queue_name, f"{type(exc).__name__}: {exc}")
        self._count("succeeded")
        return AcknowledgeType.ACCEPT

    def _dead_letter(self, record: ShareRecord, topic: str | None, reason: str) -> AcknowledgeType:
        """Moves the record to `topic` (ACCEPT once it is there), or REJECTs it (archived) when there is none."""
        if not topic:
            return AcknowledgeType.REJECT
        headers = [
            ("raybroker.error", reason.encode()),
            ("raybroker.source", f"{record.topic}-{record.partition}@{record.offset}".encode()),
        ]
        self._ready_producer().send(topic, value=record.value, key=record.key, headers=headers).result(
            ENQUEUE_TIMEOUT_S
        )
        return AcknowledgeType.ACCEPT

    def _count(self, what: str) -> None:
        with self._counts_lock:
            self._counts[what] += 1

    def _ready_broker(self) -> Broker:
        if self._broker is None:
            raise InvalidConfigError("the task processor is not initialized: call initialize() first")
        return self._broker

    def _ready_producer(self) -> Producer:
        if self._producer is None:
            raise InvalidConfigError("the task processor is not initialized: call initialize() first")
        return self._producer

    def _ready_results(self) -> TaskResults:
        if self._results is None:
            raise InvalidConfigError("the task processor is not initialized: call initialize() first")
        return self._results


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
