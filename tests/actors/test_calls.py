"""`actors.calls` on a real local Ray: a call to an actor that is restarting fails at once (raybroker's actors have
no task retries), `call_when_available` submits an idempotent call again until the restarted actor answers, and a
call whose actor died under it, or whose answer was lost from the object store, fails as an answer lost (it may have
run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.calls import call, call_when_available
from storage.errors import AnswerLostError, BrokerNotAvailableError, RequestTimedOutError
from tests.reliability.broker_support import alive_pid

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

# Long enough that the test's calls land while the actor restarts, even on a slow machine.
RESTART_SECONDS = 4.0


@ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0)
class SlowToRestart:
    """An actor whose restarts (not its first start) take `RESTART_SECONDS`, as a partition recovering its log does."""

    def __init__(self, started_marker: str) -> None:
        marker = Path(started_marker)
        if marker.exists():
            time.sleep(RESTART_SECONDS)
        marker.touch()

    def pid(self) -> int:
        return os.getpid()


@ray.remote(max_restarts=0, num_cpus=0)
class Sleeper:
    """An actor whose call runs until its process is killed."""

    def pid(self) -> int:
        return os.getpid()

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def handed(self, size: int) -> list[Any]:
        """A reference to an object this actor owns (Ray frees it with its owner)."""
        return [ray.put(b"x" * size)]


@pytest.fixture
def restarting(tmp_path: Path) -> Iterator[tuple[Any, int]]:
    """The actor, SIGKILLed and seen restarting by the GCS, and the pid it had."""
    actor = SlowToRestart.remote(str(tmp_path / "started"))
    old = call(actor.pid.remote(), timeout_s=60)
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while alive_pid(actor) == old:
        assert time.monotonic() < deadline, "the GCS never saw the kill"
        time.sleep(0.05)
    try:
        yield actor, old
    finally:
        ray.kill(actor, no_restart=True)


def test_a_call_to_a_restarting_actor_fails_at_once_and_call_when_available_waits_for_it(
    restarting: tuple[Any, int],
) -> None:
    actor, old = restarting
    started = time.monotonic()
    with pytest.raises(BrokerNotAvailableError, match="restarting"):
        call(actor.pid.remote(), timeout_s=60)
    assert time.monotonic() - started < RESTART_SECONDS
    new = call_when_available(actor.pid.remote, timeout_s=60)
    assert new != old
    assert alive_pid(actor) == new


def test_call_when_available_gives_up_after_its_timeout(restarting: tuple[Any, int]) -> None:
    actor, _ = restarting
    started = time.monotonic()
    # Still restarting (the call failed at once) or starting its new process (the call waited): either way no
    # answer within the timeout.
    with pytest.raises((BrokerNotAvailableError, RequestTimedOutError)):
        call_when_available(actor.pid.remote, timeout_s=1.0)
    assert time.monotonic() - started < RESTART_SECONDS


def test_a_call_whose_actor_dies_under_it_fails_as_an_answer_lost() -> None:
    """Ray does not say whether a dead actor ran the call: the error says the answer was lost, and it is still a
    retriable `BrokerNotAvailableError` for every caller that handles those."""
    actor = Sleeper.remote()
    pid = call(actor.pid.remote(), timeout_s=60)
    running = actor.sleep.remote(60)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(AnswerLostError) as lost:
        call(running, timeout_s=60)
    assert isinstance(lost.value, BrokerNotAvailableError) and lost.value.retriable


def test_an_answer_lost_from_the_object_store_fails_as_an_answer_lost() -> None:
    """An object lost from Ray's object store (its node removed or declared dead before the caller fetched it, or, as
    here, its owner gone) makes `ray.get` raise Ray's `ObjectLostError`: callers see a lost answer, retriable, not a
    Ray error of its own."""
    actor = Sleeper.remote()
    [handed] = call(actor.handed.remote(1 << 20), timeout_s=60)
    ray.kill(actor, no_restart=True)
    # `ray.kill` is asynchronous: a call sent right after it may still be answered.
    deadline = time.monotonic() + 30
    with pytest.raises(AnswerLostError):
        while time.monotonic() < deadline:
            call(actor.pid.remote(), timeout_s=60)
            time.sleep(0.2)
    # The node's object store may serve the object until the owner's death reaches it.
    deadline = time.monotonic() + 30
    with pytest.raises(AnswerLostError) as lost:
        while time.monotonic() < deadline:
            call(handed, timeout_s=60)
            time.sleep(0.2)
    assert lost.value.retriable


def test_an_awaited_call_that_fails_once_ray_is_shut_down_raises_typed_and_connects_to_no_ray() -> None:
    """A listener's call still in flight when its process shuts Ray down (a test's or an application's stop) fails
    as a typed error and leaves Ray shut down: translating it with a `ray.get` would start or join a Ray cluster
    again (Ray's auto-init), which a cluster's teardown then refuses. In a fresh interpreter with a Ray of its own,
    as it shuts Ray down."""
    script = (
        "import asyncio\n"
        "import ray\n"
        "from actors.calls import answer\n"
        "ray.init(address='local', num_cpus=1, include_dashboard=False, log_to_driver=False)\n"
        "@ray.remote\n"
        "class Failing:\n"
        "    def fail(self):\n"
        "        raise ValueError('refused')\n"
        "ref = Failing.remote().fail.remote()\n"
        "ray.wait([ref])\n"
        "ray.shutdown()\n"
        "try:\n"
        "    asyncio.run(answer(ref))\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
        "print(ray.is_initialized())\n"
        "ray.shutdown()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.split() == ["BrokerNotAvailableError", "False"], done.stderr[-2000:]
