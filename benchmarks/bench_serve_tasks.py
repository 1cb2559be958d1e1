"""Ray Serve's asynchronous inference (`@task_consumer` / `@task_handler`) on raybroker's share groups
(`cluster.serve.share_group_tasks.RaybrokerTaskProcessorAdapter`) against the same Serve app on Ray's own Celery
adapter (`ray.serve.task_processor.CeleryTaskProcessorAdapter`, Serve's default) with Redis as broker and backend.

| figure        | what                                                          | baseline                            |
|---------------|---------------------------------------------------------------|-------------------------------------|
| `serve_tasks` | tasks/s through the task processor: `TASKS` trivial tasks     | the same app, tasks and timing on   |
|               | (fewer with --quick) enqueued one after the other through the | Celery over Debian's `redis-server` |
|               | adapter's `enqueue_task_sync`, timed from the first enqueue   | (a new one on a free 127.0.0.1      |
|               | until `get_task_status_sync` answers SUCCESS for every one    | port, no persistence), in the same  |
|               | (median of the runs)                                          | run, alternately                    |

Both sides run one deployment of `REPLICAS` replicas with `max_ongoing_requests` = `WORKERS`, which Serve passes to
the adapter as its consumer concurrency (worker threads per replica), and hold as many tasks per worker: Celery
prefetches `worker_prefetch_multiplier` (4, its default) per worker thread under Serve's late acknowledgement, so
raybroker's workers acquire `PREFETCH` = 4 tasks a poll (`max_tasks_per_poll`; its default of 1 suits long tasks,
see `cluster.serve.share_group_tasks`). The handler adds one to its argument. Before each timed run a warm-up batch of
`WARMUP` tasks goes through the same path, so every worker is connected and polling. The statuses are read in the
order the tasks were enqueued, each task until it is no longer PENDING, so the timing ends at the last result with
about one status call a task on either side.

Redis and Celery are not the project's dependencies: `pip install -e '.[test,bench]'` brings Celery and its Redis
client, and Debian's `redis-server` must be on the PATH; without either the benchmark fails with a message saying
so.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.kafka_broker import free_ports

TASKS = 2_000
QUICK_TASKS = 100
WARMUP = 20
REPLICAS = 2
WORKERS = 4
# Tasks a worker holds at once on both sides: Celery's default `worker_prefetch_multiplier`.
PREFETCH = 4
GOAL_RATIO = 1.0
DEADLINE_S = 300.0
# How long redis-server may take to answer PING after it started.
REDIS_START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
PENDING = "PENDING"


class RedisServer:
    """Debian's `redis-server` on a free 127.0.0.1 port in `folder`, without persistence, stopped by pid."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_ports(1)[0]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed: serve_tasks' baseline needs Debian's redis-server package "
                "(apt-get install redis-server)"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / "redis.log"
        command = [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder)]
        command += ["--save", "", "--appendonly", "no", "--logfile", str(log)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            self._wait_for_ping(log)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _wait_for_ping(self, log: Path) -> None:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + REDIS_START_TIMEOUT_S
        while True:
            if self.process is not None and self.process.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {self.process.returncode} at start:\n{tail}")
            try:
                if client.ping():
                    client.close()
                    return
            except redis.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not answer on port {self.port} within {REDIS_START_TIMEOUT_S} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM to the one process this started, SIGKILL after `STOP_TIMEOUT_S`; safe to call again."""
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _require_celery() -> None:
    """`RuntimeError` saying where Celery and redis-py come from unless both import (Ray's adapter needs both)."""
    try:
        import celery  # noqa: F401
        import redis  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"{exc.name} is not installed: serve_tasks' baseline needs the bench extra (pip install -e '.[bench]')"
        ) from exc


def _celery_config(queue: str, redis_url: str) -> Any:
    from ray.serve.schema import CeleryAdapterConfig, TaskProcessorConfig

    return TaskProcessorConfig(
        queue_name=queue,
        adapter="ray.serve.task_processor.CeleryTaskProcessorAdapter",
        adapter_config=CeleryAdapterConfig(
            broker_url=redis_url, backend_url=redis_url, app_custom_config={"worker_prefetch_multiplier": PREFETCH}
        ),
    )


def _raybroker_config(queue: str) -> Any:
    from ray.serve.schema import TaskProcessorConfig

    from cluster.serve.share_group_tasks import RaybrokerAdapterConfig, RaybrokerTaskProcessorAdapter

    return TaskProcessorConfig(
        queue_name=queue,
        adapter=RaybrokerTaskProcessorAdapter,
        adapter_config=RaybrokerAdapterConfig(max_tasks_per_poll=PREFETCH),
    )


def _app(config: Any) -> Any:
    """The Serve app both sides run: `REPLICAS` replicas of one `@task_consumer` with the handler `increment`."""
    from ray import serve
    from ray.serve.task_consumer import task_consumer, task_handler

    @serve.deployment(num_replicas=REPLICAS, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=WORKERS)
    @task_consumer(task_processor_config=config)
    class Incrementer:
        @task_handler(name="increment")
        def increment(self, value: int) -> int:
            return value + 1

    return Incrementer.bind()  # type: ignore[attr-defined]


def _complete(adapter: Any, tasks: int, first: int) -> float:
    """Enqueues `tasks` tasks and reads their statuses in order until each is done; seconds from the first
    enqueue to the last SUCCESS. `RuntimeError` if a task fails or the run passes `DEADLINE_S`."""
    started = time.perf_counter()
    ids = [adapter.enqueue_task_sync("increment", args=[first + index]).id for index in range(tasks)]
    deadline = time.monotonic() + DEADLINE_S
    for index, task_id in enumerate(ids):
        while True:
            status = adapter.get_task_status_sync(task_id)
            # Ray's Celery adapter reads a task's result and then its status, two reads of the backend: a task that
            # finished between them answers SUCCESS without its result, and is asked again.
            if status.status != PENDING and not (status.status == "SUCCESS" and status.result is None):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"task {index} of {tasks} still PENDING after {DEADLINE_S:g} s")
            time.sleep(0.001)
        if status.status != "SUCCESS" or status.result != first + index + 1:
            raise RuntimeError(f"task {index} ended {status.status} with {status.result!r}")
    return time.perf_counter() - started


@contextmanager
def _deployed(config: Any) -> Iterator[Any]:
    """The app running on `config`'s adapter, warmed up; yields the driver's own adapter (enqueue, status)."""
    from ray import serve
    from ray.serve.task_consumer import instantiate_adapter_from_config

    name = config.queue_name
    adapter = instantiate_adapter_from_config(config)
    serve.run(_app(config), name=name, route_prefix=None)
    try:
        _complete(adapter, WARMUP, -WARMUP)
        yield adapter
    finally:
        serve.delete(name)


def _run_once(config: Any, tasks: int) -> float:
    with _deployed(config) as adapter:
        return tasks / _complete(adapter, tasks, 0)


def run(ctx: BenchContext) -> list[Figure]:
    tasks = QUICK_TASKS if ctx.quick else TASKS
    repeats = 1 if ctx.quick else 3
    _require_celery()
    runs: dict[str, list[float]] = {"raybroker": [], "celery": []}
    with RedisServer(ctx.scratch("redis")) as redis_server:
        from ray import serve

        ctx.environment.broker()
        serve.start(proxy_location="Disabled")
        try:
            for attempt in range(repeats):
                suffix = uuid.uuid4().hex[:8]
                runs["raybroker"].append(_run_once(_raybroker_config(f"bench-serve-{suffix}"), tasks))
                runs["celery"].append(_run_once(_celery_config(f"bench-celery-{suffix}", redis_server.url), tasks))
                ctx.progress(
                    f"  serve_tasks {attempt + 1}/{repeats}: {runs['raybroker'][-1]:,.0f} tasks/s vs Celery "
                    f"{runs['celery'][-1]:,.0f}"
                )
        finally:
            serve.shutdown()
    ours, theirs = statistics.median(runs["raybroker"]), statistics.median(runs["celery"])
    return [
        throughput_figure(
            "serve_tasks",
            ours,
            "tasks/s",
            f"Ray Serve's Celery adapter on Redis ({REPLICAS} x {WORKERS} workers, prefetch {PREFETCH}, same app)",
            theirs,
            GOAL_RATIO,
            f"ratio >= {GOAL_RATIO:g}; {tasks:,} tasks; runs: raybroker "
            f"{', '.join(f'{r:,.0f}' for r in runs['raybroker'])}, Celery "
            f"{', '.join(f'{r:,.0f}' for r in runs['celery'])} tasks/s",
        )
    ]
