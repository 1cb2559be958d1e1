"""The socket layer: accepts connections, reads request frames, hands each payload on, writes the answers.

It knows frames, connections and limits, nothing of topics or APIs: every payload goes to one `handle` coroutine
(the router), which returns the response frame, None when the request gets no answer (Produce with acks=0), or
raises `ProtocolError` for a payload that is no request it serves.

One connection's requests are handled one at a time, in the order they arrived, and answered in that order: as
Kafka's broker, which mutes a connection's channel from the moment it reads a request until the answer is sent.
Clients that pipeline requests (librdkafka sends up to `max.in.flight` at once) simply wait in the socket buffer.

What closes a connection, and only that connection (the listener and every other connection carry on):
- a size prefix above `socket.request.max.bytes` or below zero, before a byte of the frame is read or allocated;
- a frame that ends before its size says (the peer closed or stopped sending) or that does not decode;
- a request for an API key or version this server does not serve (ApiVersions excepted, which is answered);
- no complete read for `connections.max.idle.ms`;
- an error inside a handler that it did not turn into a Kafka error code (logged with its traceback: a bug).
A connection over `max.connections` (all addresses) or `max.connections.per.ip` is closed as soon as it is
accepted; Kafka's broker holds off accepting at `max.connections` instead, which asyncio's server cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cluster.protocol.errors import ProtocolError
from cluster.protocol.framing import SIZE
from storage.config.listener_config import ListenerConfig

logger = logging.getLogger(__name__)

RequestHandler = Callable[[bytes], Awaitable[bytes | None]]


@dataclass(frozen=True, slots=True)
class ServerStatistics:
    """Counts since the server started: connections open now, accepted, refused over a limit, and closed for a
    protocol error, an oversized frame, idleness or a handler failure; requests answered or handled."""

    connections_open: int
    connections_accepted: int
    connections_refused: int
    connections_closed_for_errors: int
    connections_closed_idle: int
    requests_handled: int


class KafkaServer:
    """Serves Kafka's framing on every endpoint of `config.listeners` (see the module docstring)."""

    def __init__(self, handle: RequestHandler, config: ListenerConfig, reuse_port: bool = False) -> None:
        """`reuse_port` binds with SO_REUSEPORT, so that several listener processes of a node share its port (the
        kernel spreads new connections over them); every process bound to the port must set it."""
        self._handle = handle
        self._config = config
        self._reuse_port = reuse_port
        self._servers: dict[str, asyncio.Server] = {}
        self._ports: dict[str, int] = {}
        self._connections: set[asyncio.Task[None]] = set()
        self._per_ip: Counter[str] = Counter()
        self._accepted = 0
        self._refused = 0
        self._closed_for_errors = 0
        self._closed_idle = 0
        self._requests = 0

    async def start(self) -> dict[str, int]:
        """Binds every listener; returns the port each listener name is bound to."""
        for endpoint in self._config.endpoints:
            server = await asyncio.start_server(
                self._accept, host=endpoint.host or None, port=endpoint.port, reuse_port=self._reuse_port or None
            )
            self._servers[endpoint.listener_name] = server
            self._ports[endpoint.listener_name] = server.sockets[0].getsockname()[1]
        return self.ports

    @property
    def ports(self) -> dict[str, int]:
        """The port each listener name is bound to (kept after `stop`)."""
        return dict(self._ports)

    def statistics(self) -> ServerStatistics:
        return ServerStatistics(
            len(self._connections),
            self._accepted,
            self._refused,
            self._closed_for_errors,
            self._closed_idle,
            self._requests,
        )

    async def stop(self) -> None:
        """Stops accepting, closes every connection (requests in progress are abandoned), and waits for both."""
        for server in self._servers.values():
            server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers.values():
            await server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        if (
            len(self._connections) >= self._config.max_connections
            or self._per_ip[address] >= self._config.max_connections_per_ip
        ):
            self._refused += 1
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None, "asyncio runs every connection callback in a task"
        self._accepted += 1
        self._connections.add(task)
        self._per_ip[address] += 1
        try:
            await self._serve(reader, writer, address)
        except asyncio.CancelledError:
            # `stop` cancels the connection; ending quietly keeps asyncio from reporting the cancellation as an
            # error of the connection's callback.
            pass
        finally:
            self._connections.discard(task)
            self._per_ip[address] -= 1
            if not self._per_ip[address]:
                del self._per_ip[address]
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str) -> None:
        idle_s = self._config.connections_max_idle_ms / 1000
        max_bytes = self._config.socket_request_max_bytes
        try:
            while True:
                (size,) = SIZE.unpack(await asyncio.wait_for(reader.readexactly(SIZE.size), idle_s))
                if not 0 <= size <= max_bytes:
                    logger.warning("closing %s: frame size %d outside 0..%d", address, size, max_bytes)
                    self._closed_for_errors += 1
                    return
                payload = await asyncio.wait_for(reader.readexactly(size), idle_s)
                response = await self._handle(payload)
                self._requests += 1
                if response is not None:
                    writer.write(response)
                    await writer.drain()
        except TimeoutError:
            self._closed_idle += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except ProtocolError as exc:
            logger.warning("closing %s: %s", address, exc)
            self._closed_for_errors += 1
        except Exception:
            logger.exception("closing %s: a request failed inside its handler", address)
            self._closed_for_errors += 1
