"""`InProcessTransport`: a role's method called by name, on a worker thread unless it is named inline, on the role
the getter gives at each call; its answer and its typed error are the caller's. The oracle is the thread each call
ran on and the role object that answered. `RayTransport` outside Ray: no lookup, no Ray started."""

from __future__ import annotations

import asyncio
import threading

import pytest

from cluster.protocol.views import transport as transport_module
from cluster.protocol.views.transport import EVERY_METHOD, InProcessTransport, RayTransport
from storage.errors import BrokerNotAvailableError


class Role:
    """A plain role whose methods tell which thread ran them."""

    def __init__(self, name: str) -> None:
        self.name = name

    def where(self, suffix: str, *, twice: bool = False) -> tuple[str, int, str]:
        return self.name, threading.get_ident(), suffix * (2 if twice else 1)

    def quick(self) -> tuple[str, int]:
        return self.name, threading.get_ident()

    def fail(self) -> None:
        raise BrokerNotAvailableError("restarting")


def test_calls_run_on_a_worker_thread_and_inline_ones_on_the_loop() -> None:
    transport = InProcessTransport(lambda: Role("r"), inline={"quick"})

    async def calls() -> tuple[int, tuple[str, int, str], tuple[str, int]]:
        return threading.get_ident(), await transport.call("where", "x", twice=True), await transport.call("quick")

    loop_thread, threaded, inline = asyncio.run(calls())
    assert threaded[0] == "r" and threaded[2] == "xx" and threaded[1] != loop_thread
    assert inline == ("r", loop_thread)


def test_every_method_inline() -> None:
    transport = InProcessTransport(lambda: Role("r"), inline=EVERY_METHOD)

    async def calls() -> tuple[int, tuple[str, int, str]]:
        return threading.get_ident(), await transport.call("where", "x")

    loop_thread, answered = asyncio.run(calls())
    assert answered == ("r", loop_thread, "x")


def test_each_call_reaches_the_role_the_getter_gives_then() -> None:
    roles = [Role("first")]
    transport = InProcessTransport(lambda: roles[-1])
    assert asyncio.run(transport.call("where", ""))[0] == "first"
    roles.append(Role("restarted"))
    assert asyncio.run(transport.call("where", ""))[0] == "restarted"


def test_the_roles_typed_error_is_the_callers() -> None:
    transport = InProcessTransport(lambda: Role("r"))
    with pytest.raises(BrokerNotAvailableError):
        asyncio.run(transport.call("fail"))


def test_a_ray_transport_outside_ray_fails_at_once_and_never_looks_an_actor_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listener over an in-process broker given no views of its own still refreshes its ACLs and client quotas
    through the controller's `RayTransport`. Outside Ray each call fails at once with `BrokerNotAvailableError`:
    Ray's actor lookup, which would start a local Ray cluster to search it, is never made (a lookup that is made
    fails this test instead)."""
    import ray

    def looked_up(name: str) -> None:
        raise AssertionError(f"actor {name!r} looked up outside Ray")

    monkeypatch.setattr(transport_module, "get_actor", looked_up)
    assert not ray.is_initialized()
    transport = RayTransport("raybroker-controller")
    with pytest.raises(BrokerNotAvailableError, match="not connected to a Ray cluster"):
        asyncio.run(transport.call("client_quotas_version"))
