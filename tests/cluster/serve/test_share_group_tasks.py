"""Ray Serve's asynchronous inference on raybroker's share groups (`cluster.serve.share_group_tasks`), on a real Serve
app over the broker of a real local Ray: a `@task_consumer` deployment of two replicas with two workers each takes
tasks enqueued through the adapter. Every task completes exactly once with its handler's result; a task failing once
is delivered again and succeeds; one failing every time is tried `max_retries` + 1 times and goes to the failed-task
topic with outcome FAILURE; a record naming no handler goes to the unprocessable topic; a cancelled task never runs;
and a replica killed while it runs tasks loses none: each completes on the other replica after its lock expires, and
none completes twice. Under `ShareGroupBacklogPolicy` a deployment grows from one replica to its maximum under a
backlog and shrinks back once it is drained. The broker runs with a 3 s record lock (15 s at least in Kafka unless
`group.share.min.record.lock.duration.ms` is lowered, as here)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import serve
from ray.serve.config import AutoscalingConfig, AutoscalingPolicy
from ray.serve.schema import TaskProcessorConfig
from ray.serve.task_consumer import instantiate_adapter_from_config, task_consumer, task_handler

from actors.clients.consumer import Consumer
from cluster.serve.backlog_policy import ShareGroupBacklogPolicy
from cluster.serve.share_group_tasks import RaybrokerAdapterConfig, RaybrokerTaskProcessorAdapter

pytestmark = pytest.mark.ray

DEADLINE_S = 90.0
MAX_RETRIES = 2


@pytest.fixture(scope="module")
def serve_broker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[None]:
    start_test_broker(
        group_share_record_lock_duration_ms="3000",
        group_share_min_record_lock_duration_ms="1000",
        group_share_heartbeat_interval_ms="1000",
        group_share_min_heartbeat_interval_ms="1000",
    )
    serve.start(proxy_location="Disabled")
    try:
        yield
    finally:
        serve.shutdown()


def _config(queue: str) -> TaskProcessorConfig:
    return TaskProcessorConfig(
        queue_name=queue,
        adapter=RaybrokerTaskProcessorAdapter,
        adapter_config=RaybrokerAdapterConfig(partitions=2),
        max_retries=MAX_RETRIES,
        failed_task_queue_name=f"{queue}-failed",
        unprocessable_task_queue_name=f"{queue}-unprocessable",
    )


def _app(config: TaskProcessorConfig, folder: Path, **options: Any) -> Any:
    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=4)
    @task_consumer(task_processor_config=config)
    class Worker:
        """Handlers leaving a trace in `folder`: a line per start and per end of each task."""

        def _trace(self, what: str) -> None:
            with (folder / "trace").open("a") as trace:
                trace.write(what + "\n")

        @task_handler(name="square")
        def square(self, task: str, value: int, pause: float = 0.0) -> int:
            self._trace(f"start {task}")
            time.sleep(pause)
            self._trace(f"end {task}")
            return value * value

        @task_handler(name="flaky")
        def flaky(self, task: str) -> str:
            marker = folder / f"failed-{task}"
            if not marker.exists():
                marker.touch()
                raise RuntimeError("first attempt fails")
            return "ok"

        @task_handler(name="poison")
        async def poison(self, task: str) -> None:
            self._trace(f"poison {task}")
            raise ValueError("never works")

    return Worker.options(**options).bind()  # type: ignore[attr-defined]


def _statuses(adapter: Any, ids: list[str]) -> dict[str, tuple[str, Any]]:
    answers = {}
    for task_id in ids:
        found = adapter.get_task_status_sync(task_id)
        answers[task_id] = (found.status, found.result)
    return answers


def _settled(adapter: Any, ids: list[str]) -> dict[str, tuple[str, Any]]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        statuses = _statuses(adapter, ids)
        if all(status != "PENDING" for status, _ in statuses.values()) or time.monotonic() > deadline:
            return statuses
        time.sleep(0.5)


def _topic_values(topic: str) -> list[bytes]:
    consumer = Consumer(auto_offset_reset="earliest")
    consumer.assign([(topic, 0)])
    got = [record.value for record in consumer.poll(2000)]
    consumer.close()
    return got


def test_tasks_complete_once_retry_and_dead_letter_on_a_serve_app(serve_broker: None, tmp_path: Path) -> None:
    queue = f"tasks-{uuid.uuid4().hex[:8]}"
    config = _config(queue)
    producer = instantiate_adapter_from_config(config)
    serve.run(_app(config, tmp_path), name=queue, route_prefix=None)
    try:
        squares = {producer.enqueue_task_sync("square", kwargs={"task": f"s{i}", "value": i}).id: i for i in range(12)}
        flaky = producer.enqueue_task_sync("flaky", args=["f0"]).id
        poison = producer.enqueue_task_sync("poison", args=["p0"]).id
        unknown = producer.enqueue_task_sync("nope", args=[1]).id
        statuses = _settled(producer, [*squares, flaky, poison, unknown])
        assert {task_id: statuses[task_id] for task_id in squares} == {
            task_id: ("SUCCESS", value * value) for task_id, value in squares.items()
        }
        assert statuses[flaky] == ("SUCCESS", "ok")
        assert statuses[poison] == ("FAILURE", "ValueError: never works")
        assert statuses[unknown] == ("FAILURE", "no handler is registered for task 'nope'")
        trace = (tmp_path / "trace").read_text().splitlines()
        assert trace.count("poison p0") == MAX_RETRIES + 1
        assert sorted(line for line in trace if line.startswith("end")) == sorted(f"end s{i}" for i in range(12))
        assert [b'{"task":"poison"' in value for value in _topic_values(f"{queue}-failed")] == [True]
        assert [b'{"task":"nope"' in value for value in _topic_values(f"{queue}-unprocessable")] == [True]
        # Cancelled before any worker could take it: it never runs and stays REVOKED.
        serve.delete(queue)
        cancelled = producer.enqueue_task_sync("square", kwargs={"task": "c0", "value": 3}).id
        producer.cancel_task_sync(cancelled)
        serve.run(_app(config, tmp_path), name=queue, route_prefix=None)
        time.sleep(3)
        assert producer.get_task_status_sync(cancelled).status == "REVOKED"
        assert "start c0" not in (tmp_path / "trace").read_text().splitlines()
        # The async methods are the same calls off the event loop.
        asynchronous = asyncio.run(producer.enqueue_task_async("square", kwargs={"task": "x0", "value": 7})).id
        assert _settled(producer, [asynchronous])[asynchronous] == ("SUCCESS", 49)
        status = asyncio.run(producer.get_task_status_async(asynchronous))
        assert (status.status, status.result) == ("SUCCESS", 49)
        asyncio.run(producer.cancel_task_async(asynchronous))  # it has an outcome: nothing changes
        assert asyncio.run(producer.get_task_status_async(asynchronous)).status == "SUCCESS"
        assert asyncio.run(producer.get_metrics_async())["queue"] == queue
        assert asyncio.run(producer.health_check_async()) == producer.health_check_sync()
    finally:
        serve.delete(queue)
        producer.stop_consumer()


def test_a_killed_replica_loses_no_task_and_none_completes_twice(serve_broker: None, tmp_path: Path) -> None:
    queue = f"kills-{uuid.uuid4().hex[:8]}"
    config = _config(queue)
    producer = instantiate_adapter_from_config(config)
    serve.run(_app(config, tmp_path), name=queue, route_prefix=None)
    try:
        ids = [
            producer.enqueue_task_sync("square", kwargs={"task": f"k{i}", "value": i, "pause": 0.5}).id
            for i in range(16)
        ]
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and not (tmp_path / "trace").exists():
            time.sleep(0.1)
        replicas = [
            actor
            for actor in ray.util.list_named_actors(all_namespaces=True)
            if actor["name"].startswith("SERVE_REPLICA::") and queue in actor["name"]
        ]
        assert len(replicas) == 2
        ray.kill(ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"]), no_restart=True)
        statuses = _settled(producer, ids)
        assert statuses == {task_id: ("SUCCESS", i * i) for i, task_id in enumerate(ids)}
        trace = (tmp_path / "trace").read_text().splitlines()
        ends = [line for line in trace if line.startswith("end")]
        # Each task completed once: a task whose replica died mid-run started twice and ended once.
        assert sorted(ends) == sorted(f"end k{i}" for i in range(16))
    finally:
        serve.delete(queue)
        producer.stop_consumer()


def _running_replicas(app: str) -> int:
    deployments = serve.status().applications[app].deployments
    return sum(deployment.replica_states.get("RUNNING", 0) for deployment in deployments.values())


def test_the_deployment_grows_with_the_backlog_and_shrinks_once_it_is_drained(
    serve_broker: None, tmp_path: Path
) -> None:
    queue = f"scales-{uuid.uuid4().hex[:8]}"
    config = _config(queue)
    producer = instantiate_adapter_from_config(config)
    policy = AutoscalingPolicy(
        policy_function=ShareGroupBacklogPolicy,
        policy_kwargs={"queue_name": queue, "tasks_per_replica": 4, "refresh_s": 0.5},
    )
    autoscaling = AutoscalingConfig(
        min_replicas=1, max_replicas=3, upscale_delay_s=0, downscale_delay_s=1, policy=policy
    )
    serve.run(
        _app(config, tmp_path, num_replicas="auto", autoscaling_config=autoscaling), name=queue, route_prefix=None
    )
    try:
        assert _running_replicas(queue) == 1
        ids = [
            producer.enqueue_task_sync("square", kwargs={"task": f"a{i}", "value": i, "pause": 2.0}).id
            for i in range(32)
        ]
        most = 1
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and any(
            producer.get_task_status_sync(task_id).status == "PENDING" for task_id in ids[-4:]
        ):
            most = max(most, _running_replicas(queue))
            time.sleep(0.3)
        # 32 tasks of 2 s: 8 replicas' worth at 4 a replica, so the deployment went to its maximum.
        assert most == 3
        assert _settled(producer, ids) == {task_id: ("SUCCESS", i * i) for i, task_id in enumerate(ids)}
        # A task's outcome is recorded before its acknowledgement: the last ones are acknowledged a moment later.
        while time.monotonic() < deadline and producer.get_metrics_sync()["backlog"] > 0:
            time.sleep(0.3)
        assert producer.get_metrics_sync()["backlog"] == 0
        while time.monotonic() < deadline and _running_replicas(queue) > 1:
            time.sleep(0.3)
        assert _running_replicas(queue) == 1
    finally:
        serve.delete(queue)
        producer.stop_consumer()
