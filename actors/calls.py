"""Calling raybroker's actors from client code: `ray.get` with the project's errors, and named actors.

Ray wraps an exception raised inside an actor in `RayTaskError`; clients see the original typed error
from `storage.errors` instead (`OffsetOutOfRangeError`, `InvalidRecordError`, ...). An actor that is
dead or restarting, or an answer lost with the node whose object store held it, surfaces as
`BrokerNotAvailableError` (its `AnswerLostError`: the call may have run), which producers treat as retriable.

Finding a partition's replicas is `actors.server.partition_lookup`'s.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

import ray
from ray.exceptions import (
    ActorUnavailableError,
    ActorUnschedulableError,
    GetTimeoutError,
    ObjectLostError,
    RayActorError,
    RayTaskError,
)

from actors.options import (
    CONTROLLER_NAME,
    NAMESPACE,
    group_coordinator_name,
)
from storage.errors import (
    AnswerLostError,
    BrokerNotAvailableError,
    RaybrokerError,
    RequestTimedOutError,
)

# How often `call_when_available` submits its call again while the actor restarts.
RESTART_POLL_SECONDS = 0.2
# What a failed `ray.get` or awaited call raises that `_raise_typed` turns into the project's errors.
_FAILED_CALL = (RayTaskError, RayActorError, ActorUnschedulableError, GetTimeoutError, ObjectLostError)


def call(ref: Any, timeout_s: float | None = None) -> Any:
    """`ray.get(ref)`, raising the actor's own typed error rather than Ray's wrapper."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except _FAILED_CALL as exc:
        _raise_typed(exc, timeout_s)


class RayPending:
    """The answer of one `.remote()` call; `result` is `call` on it (a `storage.pending.Pending`)."""

    __slots__ = ("ref",)

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def result(self, timeout: float | None = None) -> Any:
        return call(self.ref, timeout_s=timeout)


def call_when_available(submit: Callable[[], Any], timeout_s: float) -> Any:
    """`call(submit())` for an idempotent call, submitted again while its actor restarts.

    raybroker's actors have no task retries, so Ray fails a call made while the actor restarts at once, with
    `ActorUnavailableError`, although the actor will answer in a moment: a log manager re-created while one of its
    partition actors is still restarting must wait for it, not fail its own start. Every other failure, and the
    actor still restarting after `timeout_s`, raises what `call` raises."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(submit(), timeout=max(0.0, deadline - time.monotonic()))
        except ActorUnavailableError as exc:
            if time.monotonic() + RESTART_POLL_SECONDS >= deadline:
                _raise_typed(exc, timeout_s)
            time.sleep(RESTART_POLL_SECONDS)
        except _FAILED_CALL as exc:
            _raise_typed(exc, timeout_s)


def _raise_typed(exc: Exception, timeout_s: float | None) -> NoReturn:
    """Raises the project's error for a failed `ray.get`: the actor's own typed error, `BrokerNotAvailableError`
    for a dead or restarting actor (or one pinned to a node that is gone), `RequestTimedOutError` for no answer in
    time."""
    if isinstance(exc, RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, RaybrokerError):
            raise cause from None
        if isinstance(cause, (RayActorError, ActorUnschedulableError)):
            _raise_unavailable(cause)
        raise exc
    if isinstance(exc, GetTimeoutError):
        raise RequestTimedOutError(f"no answer within {timeout_s} s") from exc
    _raise_unavailable(exc)


def _raise_unavailable(exc: Exception) -> NoReturn:
    """`BrokerNotAvailableError` for an actor that could not be placed (the call never ran), `AnswerLostError` for
    one that died or restarted, and for an answer lost with the node that held it (`ObjectLostError`: a node removed
    or declared dead before the caller fetched a large answer from its object store): Ray does not say whether that
    happened before or after the actor took the call."""
    if isinstance(exc, (RayActorError, ObjectLostError)):
        raise AnswerLostError(f"actor unavailable: {exc}") from None
    raise BrokerNotAvailableError(f"actor unavailable: {exc}") from None


def finished(future: concurrent.futures.Future[Any]) -> Any:
    """The value of a finished `ref.future()`, a failure raising what `call` raises for it (usable in the future's
    callback, where `ray.get` must not be called)."""
    try:
        return future.result(0)
    except (RayTaskError, RayActorError, ActorUnschedulableError, ActorUnavailableError, ObjectLostError) as exc:
        _raise_typed(exc, None)


async def answer(ref: Any) -> Any:
    """`call` for an event loop: the value of an actor call, awaited, a failure raising what `call` raises for it.
    The failure is translated as it came, never by a `ray.get`: a call that fails once this process has shut Ray
    down (a listener's call in flight while its test or application stops) must not start or join a Ray cluster
    again, which Ray's `ray.get` does when Ray is not initialized."""
    try:
        return await ref
    except _FAILED_CALL as exc:
        _raise_typed(exc, None)
    except Exception:
        if not ray.is_initialized():
            raise BrokerNotAvailableError("this process disconnected from Ray while the call was under way") from None
        raise


def get_actor(name: str) -> Any:
    """A named raybroker actor, or `BrokerNotAvailableError` if none runs under that name."""
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        raise BrokerNotAvailableError(f"no actor {name!r} in namespace {NAMESPACE!r}: is the broker running?") from None


def controller() -> Any:
    return get_actor(CONTROLLER_NAME)


class CachedActor:
    """A named actor's handle, looked up once for a process's many callers: each `get_actor` is a round trip to
    Ray's GCS and a new handle (a partition host opening thousands of partitions spent most of its CPU asking for
    the controller; a share-partition's leader asked for the group coordinator at each acknowledgement's state
    write). A call that finds the actor unavailable (`BrokerNotAvailableError`: restarting, or replaced by another
    under its name) forgets the handle, so the next call looks the actor up again."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._handle: Any = None

    def call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """`call` of the actor's `method` with `args`."""
        with self._lock:
            if self._handle is None:
                self._handle = get_actor(self._name)
            handle = self._handle
        try:
            return call(getattr(handle, method).remote(*args), timeout_s=timeout_s)
        except BrokerNotAvailableError:
            with self._lock:
                if self._handle is handle:
                    self._handle = None
            raise


# The process's controller handle, for callers that ask it once per partition (a host's replicas).
SHARED_CONTROLLER = CachedActor(CONTROLLER_NAME)
# The process's group coordinator handle, for the share-partitions' state writes of a host's leaders.
SHARED_GROUP_COORDINATOR = CachedActor(group_coordinator_name())


def this_node_id() -> str:
    """The Ray node of this process ("" when Ray is not initialized, which matches no partition): where a partition's
    replica is local, so its files and same-node channels can be used without a call."""
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""


def actor_node(handle: Any) -> str:
    """The Ray node a running actor is on, asked of the actor itself (`__ray_call__`)."""
    return str(call(handle.__ray_call__.remote(_own_node)))


def _own_node(_actor: object) -> str:
    """Run inside an actor: the Ray node it runs on."""
    return this_node_id()


# A killed actor's name is released asynchronously; an actor created under the same name before that
# (a broker restarted right after a stop) would get the dying one back from `get_if_exists`.
NAME_RELEASE_TIMEOUT_S = 30.0


def kill_and_wait(handle: Any, name: str, timeout_s: float = NAME_RELEASE_TIMEOUT_S) -> None:
    """Kills a named actor for good and waits until its name is free again (or `timeout_s` passes)."""
    ray.kill(handle, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            return
        time.sleep(0.05)
