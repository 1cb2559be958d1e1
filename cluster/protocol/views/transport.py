"""How a view's calls reach a role of the broker: in this process, or in its actor on Ray.

A role (the group coordinator, the transaction coordinator, the controller) has the same methods in both hosts:
the plain class of `actors.core` in process, and the actor that wraps it on Ray. A view (`GroupView`,
`TransactionView`, `SecurityView`) is written once over a `Transport`, whose one call runs a role's method by name
wherever the role lives and answers its result or raises the broker's typed errors (`storage.errors`), never Ray's.

- `InProcessTransport` runs the method of a plain role on a worker thread (`on_worker`), leaving the event loop to
  the other connections (the role may append to a log or wait), or on the event loop itself for the methods named
  `inline`, which answer from memory at once. The in-process views' worker threads are a pool of their own
  (`IN_PROCESS_WORKERS` threads), not asyncio's default one of `cpu count + 4`: one client's Fetch waits on a thread
  per partition (up to its `fetch.max.wait.ms`, 5 s for some clients), so the default pool would hold every other
  connection's calls behind a few long polls.
- `RayTransport` calls the method of a named actor, awaited without blocking the loop. The actor's handle is looked
  up once (on a worker thread: the lookup blocks; concurrent callers share one lookup) and forgotten when a call
  fails retriably (the actor gone or restarting), so the next call reaches a restarted actor. In a process not
  connected to Ray there is no actor to find: the call fails at once with `BrokerNotAvailableError`, where Ray's
  own lookup would start a local Ray cluster (a listener over an in-process broker given no views of its own).

- `RayChannelTransport` is a `RayTransport` to an actor that also listens on a same-node channel
  (`actors.channels.local_channel`): when the actor runs on this process's node, its channel's methods go over the
  channel instead of Ray (the group and transaction coordinators', `group_transport.py` and
  `transaction_transport.py`). The actor's handle and channel are looked up together and forgotten together when a
  call fails retriably (the actor gone or restarting, a channel connection broken), so the next call reaches a
  restarted or moved actor.

What differs between the hosts is a parameter of the transport, not of the view: `max_wait_ms`, how long one call
may wait on the host for an answer still pending (a JoinGroup or SyncGroup waiting for the other members).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable, Collection, Container
from typing import Any, Protocol, TypeVar

import ray

from actors.calls import answer, get_actor
from actors.core.groups.group_coordinator import MAX_WAIT_MS
from storage.errors import BrokerNotAvailableError, RaybrokerError

# One bounded wait in process: the roles' timed events (session expiry, the rebalance timeout) run on their clock,
# which a test may move by hand, and a moved `MockClock` takes effect within one wait.
AWAIT_MS = 20
# The in-process views' worker threads (see the module docstring); an idle one costs a parked thread.
IN_PROCESS_WORKERS = 256
_workers = concurrent.futures.ThreadPoolExecutor(IN_PROCESS_WORKERS, thread_name_prefix="in-process-view")
_Result = TypeVar("_Result")


async def on_worker(function: Callable[..., _Result], *args: Any, **kwargs: Any) -> _Result:
    """`function(*args, **kwargs)` run on one of the in-process views' worker threads, awaited on the loop."""
    return await asyncio.get_running_loop().run_in_executor(_workers, functools.partial(function, *args, **kwargs))


class Transport(Protocol):
    """A role's methods, called by name (see the module docstring)."""

    # How long one call may wait on the host for an answer still pending.
    max_wait_ms: int

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The role's `method` called with these arguments; its result, or its typed error."""
        ...


class _EveryMethod:
    """A container of every method name."""

    def __contains__(self, method: object) -> bool:
        return True


# `InProcessTransport(..., inline=EVERY_METHOD)`: every call runs on the event loop.
EVERY_METHOD: Container[str] = _EveryMethod()


class InProcessTransport:
    """A plain role in this process (see the module docstring). `role` gives the role at each call, so a role the
    in-process broker makes again (a coordinator's restart) is the one called."""

    def __init__(
        self, role: Callable[[], object], *, inline: Container[str] = frozenset(), max_wait_ms: int = AWAIT_MS
    ) -> None:
        self._role = role
        self._inline = inline
        self.max_wait_ms = max_wait_ms

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        bound = getattr(self._role(), method)
        if method in self._inline:
            return bound(*args, **kwargs)
        return await on_worker(bound, *args, **kwargs)


class RayTransport:
    """The actor named `name` of the Ray cluster this process is connected to (see the module docstring). A call
    waits at most what the coordinators' waits allow (`MAX_WAIT_MS`) by default: on Ray a waiting call holds one of
    the actor's threads, not the listener's."""

    def __init__(self, name: str, *, max_wait_ms: int = MAX_WAIT_MS) -> None:
        self._name = name
        self.max_wait_ms = max_wait_ms
        self._handle: Any = None
        self._lookup: asyncio.Future[Any] | None = None

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        handle = await self._actor()
        try:
            return await answer(getattr(handle, method).remote(*args, **kwargs))
        except RaybrokerError as exc:
            if self._forgets(exc):
                self._forget()
            raise

    async def _actor(self) -> Any:
        """The actor's handle, looked up if it was forgotten. One lookup at a time, which every caller awaits: a
        lookup blocks its worker thread as long as Ray's GCS does not answer (its head lost), and one per call would
        take every worker thread of the loop meanwhile. A caller that stops waiting leaves the lookup running."""
        self._check_connected()
        if self._handle is None:
            if self._lookup is None:
                lookup = self._lookup = asyncio.ensure_future(asyncio.to_thread(get_actor, self._name))
                lookup.add_done_callback(self._looked_up)
            self._handle = await asyncio.shield(self._lookup)
        return self._handle

    def _check_connected(self) -> None:
        """`BrokerNotAvailableError` when this process is not connected to a Ray cluster (never connected, or shut
        down since): no call is made, so none can start or join one again."""
        if not ray.is_initialized():
            raise BrokerNotAvailableError(f"no actor {self._name!r}: this process is not connected to a Ray cluster")

    def _looked_up(self, lookup: asyncio.Future[Any]) -> None:
        if self._lookup is lookup:
            self._lookup = None

    def _forgets(self, exc: RaybrokerError) -> bool:
        """Whether a call's failure forgets the actor's handle: whether it may be gone or restarting."""
        return exc.retriable

    def _forget(self) -> None:
        self._handle = None


class ChannelConnections(Protocol):
    """A listener's connections to an actor's same-node channel."""

    address: str

    @property
    def has_free_connection(self) -> bool:
        """Whether a call would start at once; when not, the call goes through Ray instead of waiting."""
        ...

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The actor's `method` called with these arguments over the channel; its result, or its typed error."""
        ...

    def close(self) -> None: ...


class RayChannelTransport(RayTransport):
    """An actor on Ray whose `channel_methods` go over its same-node channel when it runs on this node (see the
    module docstring); `_look_up` finds both."""

    def __init__(self, name: str, channel_methods: Collection[str], *, max_wait_ms: int = MAX_WAIT_MS) -> None:
        super().__init__(name, max_wait_ms=max_wait_ms)
        self._channel_methods = channel_methods
        self._channel: ChannelConnections | None = None
        self._looking_up = asyncio.Lock()

    @property
    def channel_address(self) -> str | None:
        """Where the channel's methods go now: the actor's channel, or None for Ray calls (or no actor found
        yet)."""
        return None if self._channel is None else self._channel.address

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method in self._channel_methods:
            await self._actor()
            channel = self._channel
            if channel is not None and channel.has_free_connection:
                try:
                    return await channel.call(method, *args, **kwargs)
                except RaybrokerError as exc:
                    if self._forgets(exc):
                        self._forget()
                    raise
        return await super().call(method, *args, **kwargs)

    async def _actor(self) -> Any:
        """The actor's handle, looked up (and its channel with it) if it was forgotten."""
        self._check_connected()
        async with self._looking_up:
            if self._handle is None:
                self._handle, self._channel = await asyncio.to_thread(self._look_up)
            return self._handle

    def _look_up(self) -> tuple[Any, ChannelConnections | None]:
        """The actor's handle and, when it runs on this node, connections to its channel (blocks: run on a worker
        thread)."""
        raise NotImplementedError

    def _forget(self) -> None:
        super()._forget()
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
