"""Calling raybroker's actors from client code: `ray.get` with the project's errors, and actor lookup.

Ray wraps an exception raised inside an actor in `RayTaskError`; clients see the original typed error
from `storage.errors` instead (`OffsetOutOfRangeError`, `InvalidRecordError`, ...). An actor that is
dead or restarting surfaces as `BrokerNotAvailableError`, which producers treat as retriable.
"""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from actors.options import CONTROLLER_NAME, NAMESPACE, partition_actor_name
from storage.errors import BrokerNotAvailableError, RaybrokerError, RequestTimedOutError, UnknownTopicOrPartitionError


def call(ref: Any, timeout_s: float | None = None) -> Any:
    """`ray.get(ref)`, raising the actor's own typed error rather than Ray's wrapper."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, RaybrokerError):
            raise cause from None
        if isinstance(cause, RayActorError):
            raise BrokerNotAvailableError(f"actor unavailable: {cause}") from None
        raise
    except RayActorError as exc:
        raise BrokerNotAvailableError(f"actor unavailable: {exc}") from None
    except GetTimeoutError as exc:
        raise RequestTimedOutError(f"no answer within {timeout_s} s") from exc


def call_all(refs: list[Any], timeout_s: float | None = None) -> list[Any]:
    """`call` for several refs, waiting for all of them."""
    return [call(ref, timeout_s) for ref in refs]


def get_actor(name: str) -> Any:
    """A named raybroker actor, or `BrokerNotAvailableError` if none runs under that name."""
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        raise BrokerNotAvailableError(f"no actor {name!r} in namespace {NAMESPACE!r}: is the broker running?") from None


def controller() -> Any:
    return get_actor(CONTROLLER_NAME)


def partition_actor(topic: str, partition: int) -> Any:
    """The partition actor of (topic, partition); `UnknownTopicOrPartitionError` if the cluster has none."""
    try:
        return ray.get_actor(partition_actor_name(topic, partition), namespace=NAMESPACE)
    except ValueError:
        raise UnknownTopicOrPartitionError(f"no partition {topic}-{partition} is hosted") from None


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


def check_topic_partition(tp: object, error: type[RaybrokerError] = UnknownTopicOrPartitionError) -> tuple[str, int]:
    """`tp` as a (topic, partition) tuple, or `error` unless it is (str, int >= 0)."""
    if (
        not isinstance(tp, tuple)
        or len(tp) != 2
        or not isinstance(tp[0], str)
        or not isinstance(tp[1], int)
        or isinstance(tp[1], bool)
        or tp[1] < 0
    ):
        raise error(f"expected a (topic, partition >= 0) tuple, got {tp!r}")
    return tp[0], tp[1]
