"""`actors.server.replica_links` on a real local Ray: which answers to a leader's AlterPartition drop the change it
asked for (`RayControllerLink` calls `refused()`) and which leave it pending, as Kafka's leader does."""

from __future__ import annotations

import concurrent.futures

import pytest
import ray

from actors.server.replica_links import not_applied
from storage.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    NotControllerError,
    RaybrokerError,
)

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


@ray.remote(num_cpus=0, max_retries=0)
def refuse(error: RaybrokerError) -> None:
    """Stands in for the controller's refusal: raises `error` in a Ray worker, as the actor's method does."""
    raise error


def answer_error(error: RaybrokerError) -> BaseException | None:
    """The exception a Ray call's future completes with when the remote side raised `error`."""
    future = refuse.remote(error).future()
    concurrent.futures.wait([future], timeout=60)
    return future.exception()


def test_only_an_ineligible_replica_drops_the_change_asked_for() -> None:
    assert not_applied(answer_error(IneligibleReplicaError("node-c cannot join the ISR")))
    for stale in (
        InvalidUpdateVersionError("t-0 is in partition epoch 3, not 2"),
        FencedLeaderEpochError("t-0 is in leader epoch 4, not 3"),
        NotControllerError("a newer controller decided it"),
    ):
        assert not not_applied(answer_error(stale)), type(stale).__name__
    assert not not_applied(None)
