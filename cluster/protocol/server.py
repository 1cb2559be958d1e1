"""The socket layer: accepts connections, reads request frames, hands each payload on, writes the answers.

It knows frames, connections and limits, nothing of topics or APIs: every payload goes to one `handle` coroutine
(the router) with its connection's `ConnectionContext`, which returns the response frame, None when the request
gets no answer (Produce with acks=0), or raises `ProtocolError` for a payload that is no request it serves.

SSL and SASL_SSL listeners run TLS (`tls_contexts`, per listener name) before the first frame; a handshake that
fails (garbage, a client certificate missing where `ssl.client.auth=required`) closes only that connection. A
verified client certificate names the connection's principal. On SASL listeners a connection's frames are capped
at `sasl.server.max.receive.size` until it has authenticated, and a failed authentication is answered after
`connection.failed.authentication.delay.ms`, then the connection is closed. Fetch answers over TLS cannot be
`sendfile`d (the kernel does not encrypt): their file regions are read into memory and written through TLS.

Requests of one connection are answered in the order they arrived, as Kafka requires. Clients pipeline them
(librdkafka sends up to `max.in.flight` Produce requests at once), and each one here waits on an actor, so
handling them strictly one at a time would cap a connection at one actor round trip per request. Requests the
`overlaps` predicate accepts (the router's: Produce, Fetch and ListOffsets) are therefore handled concurrently while
the next frames are read; any other request waits until every earlier one of its connection is handled, and the
connection reads nothing more until it is handled too, so group and admin calls keep Kafka's one-at-a-time order.
Appends to one partition still reach its log in arrival order: handlers start in arrival order and the broker view
submits each partition's appends in the order they were asked for. At most `queued.max.requests` requests (of all
connections) are read and not yet answered; the next frame is read when one is answered.

What closes a connection, and only that connection (the listener and every other connection carry on):
- a size prefix above `socket.request.max.bytes` or below zero, before a byte of the frame is read or allocated;
- a frame that ends before its size says (the peer closed or stopped sending) or that does not decode;
- a request for an API key or version this server does not serve (ApiVersions excepted, which is answered);
- no complete read for `connections.max.idle.ms`;
- a failed TLS handshake or SASL authentication (after the delay above);
- an error inside a handler that it did not turn into a Kafka error code (logged with its traceback: a bug).
A connection a client quota applies to has its requests handled one at a time, and once throttled
(`ConnectionContext.muted_until`) is not read from until its throttle time has passed, as Kafka mutes a throttled
channel: pipelined requests would be taken in before the throttle of the first could hold them back.
The answers of requests read before the one that closes it are still sent.
A connection over `max.connections` (all addresses) or `max.connections.per.ip` is closed as soon as it is
accepted; Kafka's broker holds off accepting at `max.connections` instead, which asyncio's server cannot. A connection
the `connection_throttle` seam holds (a `connection_creation_rate` quota, `cluster.protocol.quota_enforcer`) is closed
unread once its throttle time has passed, as Kafka's acceptor closes a throttled connection.

Metrics (`actors.metrics`): connections opened and closed and failed authentications per listener name, and per
request the time from its frame read to its answer written (Kafka's TotalTimeMs: queueing, handling, waiting for
the earlier answers of its connection and writing), under the name and version `request_name` reads from the
payload (the router's: the server itself knows no API).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from actors.metrics.recorder import NO_METRICS, BrokerMetrics
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import AuthenticationFailedError, ProtocolError
from cluster.protocol.file_region import FileRegion
from cluster.protocol.framing import SIZE, SplicedFrame
from cluster.protocol.security.tls import certificate_principal
from storage.config.listener_config import OS_DEFAULT_BUFFER_BYTES, Endpoint, ListenerConfig
from storage.config.security_config import SecurityConfig

logger = logging.getLogger(__name__)

RequestHandler = Callable[[bytes, ConnectionContext], Coroutine[Any, Any, bytes | SplicedFrame | None]]
OverlapPredicate = Callable[[bytes], bool]
RequestName = Callable[[bytes], tuple[str, int] | None]
_Answer = asyncio.Task[bytes | SplicedFrame | None]
# A request being handled: the task answering it, its payload, and when its frame was read (perf_counter, s).
_Pending = tuple[_Answer, bytes, float]


@dataclass(frozen=True, slots=True)
class ServerStatistics:
    """Counts since the server started: connections open now, accepted, refused over a limit, and closed for a
    protocol error, an oversized frame, idleness or a handler failure; requests answered or handled; bytes sent
    with `sendfile` from segment files; failed SASL authentications."""

    connections_open: int
    connections_accepted: int
    connections_refused: int
    connections_closed_for_errors: int
    connections_closed_idle: int
    requests_handled: int
    file_bytes_sent: int
    authentication_failures: int


class KafkaServer:
    """Serves Kafka's framing on every endpoint of `config.listeners` (see the module docstring)."""

    def __init__(
        self,
        handle: RequestHandler,
        config: ListenerConfig,
        reuse_port: bool = False,
        overlaps: OverlapPredicate = lambda _payload: False,
        security: SecurityConfig | None = None,
        tls_contexts: dict[str, ssl.SSLContext] | None = None,
        metrics: BrokerMetrics = NO_METRICS,
        request_name: RequestName = lambda _payload: None,
        connection_throttle: Callable[[str], int] = lambda _address: 0,
        disconnected: Callable[[ConnectionContext], Awaitable[None]] | None = None,
    ) -> None:
        """`overlaps(payload)` says whether a request may be handled while other requests of its connection are
        (see the module docstring). `reuse_port` binds with SO_REUSEPORT, so that several listener processes of a
        node share its port (the kernel spreads new connections over them); every process bound to the port must
        set it. `tls_contexts` holds the TLS context of each SSL or SASL_SSL listener name; `security` the limits
        and delays of authentication. `metrics` records connections and answered requests, each under the
        (API name, version) `request_name(payload)` gives (a request it names None is not recorded).
        `connection_throttle(address)` is how long in ms to hold a new connection from `address` before closing it
        unread (0: serve it). `disconnected(context)` is told of each served connection that closed while the server
        runs (what the connection's share sessions need), after its last answer."""
        self._handle = handle
        self._disconnected = disconnected
        self._metrics = metrics
        self._request_name = request_name
        self._connection_throttle = connection_throttle
        self._throttled: set[asyncio.Task[None]] = set()
        self._security = security or SecurityConfig()
        self._tls_contexts = dict(tls_contexts or {})
        self._overlaps = overlaps
        self._queue_slots = asyncio.Semaphore(config.queued_max_requests)
        self._config = config
        self._reuse_port = reuse_port
        self._servers: dict[str, asyncio.Server] = {}
        self._ports: dict[str, int] = {}
        self._connections: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._per_ip: Counter[str] = Counter()
        self._accepted = 0
        self._refused = 0
        self._closed_for_errors = 0
        self._closed_idle = 0
        self._requests = 0
        self._file_bytes_sent = 0
        self._authentication_failures = 0

    async def start(self) -> dict[str, int]:
        """Binds every listener; returns the port each listener name is bound to."""
        for endpoint in self._config.endpoints:
            server = await asyncio.start_server(
                functools.partial(self._accept, endpoint),
                host=endpoint.host or None,
                port=endpoint.port,
                reuse_port=self._reuse_port or None,
                ssl=self._tls_contexts.get(endpoint.listener_name),
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
            self._file_bytes_sent,
            self._authentication_failures,
        )

    async def stop(self) -> None:
        """Stops accepting, drops every connection (requests in progress and answers not yet sent are abandoned:
        a client that reads nothing cannot hold the shutdown), and waits for both."""
        self._stopping = True
        for server in self._servers.values():
            server.close()
        for task in [*self._connections, *self._throttled]:
            task.cancel()
        await asyncio.gather(*self._connections, *self._throttled, return_exceptions=True)
        for server in self._servers.values():
            await server.wait_closed()

    async def _accept(self, endpoint: Endpoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
        throttle_ms = self._connection_throttle(address)
        if throttle_ms > 0:
            self._refused += 1
            self._throttled.add(task)
            try:
                await asyncio.sleep(throttle_ms / 1000)
            except asyncio.CancelledError:
                pass
            finally:
                self._throttled.discard(task)
                writer.transport.abort()
            return
        _bound_send_buffer(writer, self._config.socket_send_buffer_bytes)
        self._accepted += 1
        self._connections.add(task)
        self._per_ip[address] += 1
        self._metrics.connection_opened(endpoint.listener_name)
        context = ConnectionContext.accepted(
            endpoint.listener_name,
            endpoint.security_protocol,
            address,
            certificate_principal(writer.get_extra_info("ssl_object")),
        )
        try:
            await self._serve(reader, writer, context)
        except asyncio.CancelledError:
            # `stop` cancels the connection; ending quietly keeps asyncio from reporting the cancellation as an
            # error of the connection's callback.
            pass
        finally:
            self._metrics.connection_closed(endpoint.listener_name)
            self._connections.discard(task)
            self._per_ip[address] -= 1
            if not self._per_ip[address]:
                del self._per_ip[address]
            await self._close(writer)
            if self._disconnected is not None and not self._stopping:
                try:
                    await self._disconnected(context)
                except Exception:
                    logger.exception("after closing a connection of %s", address)

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        """Closes a connection once its unsent answers are flushed, or at once (dropping them) when the server
        stops, also if it stops while this waits for a client that does not read."""
        if self._stopping:
            writer.transport.abort()
            return
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            writer.transport.abort()
            raise

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, context: ConnectionContext
    ) -> None:
        """Reads requests and writes their answers concurrently, until either side ends the connection."""
        answers: asyncio.Queue[_Pending | None] = asyncio.Queue()
        reading = asyncio.create_task(self._read_requests(reader, answers, context))
        try:
            await self._write_answers(answers, writer, context)
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            while not answers.empty():
                pending = answers.get_nowait()
                if pending is not None:
                    pending[0].cancel()
                    self._queue_slots.release()

    async def _read_requests(
        self, reader: asyncio.StreamReader, answers: asyncio.Queue[_Pending | None], context: ConnectionContext
    ) -> None:
        """Reads frames and starts their handling, in order; puts None on `answers` when reading ends."""
        idle_s = self._config.connections_max_idle_ms / 1000
        running: set[_Answer] = set()
        try:
            while True:
                muted_s = context.muted_until - time.monotonic()
                if muted_s > 0:
                    await asyncio.sleep(muted_s)
                (size,) = SIZE.unpack(await _read_exactly(reader, SIZE.size, idle_s))
                max_bytes = self._config.socket_request_max_bytes
                if not context.authenticated:
                    max_bytes = min(max_bytes, self._security.sasl_server_max_receive_size)
                if not 0 <= size <= max_bytes:
                    logger.warning("closing %s: frame size %d outside 0..%d", context.client_host, size, max_bytes)
                    self._closed_for_errors += 1
                    return
                payload = await _read_exactly(reader, size, idle_s)
                read_at = time.perf_counter()
                alone = context.quota_bound or not self._overlaps(payload)
                if alone and running:
                    await asyncio.wait(running)
                await self._queue_slots.acquire()
                task = asyncio.create_task(self._handle(payload, context))
                running.add(task)
                task.add_done_callback(running.discard)
                answers.put_nowait((task, payload, read_at))
                if alone:
                    await asyncio.wait({task})
        except TimeoutError:
            self._closed_idle += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            answers.put_nowait(None)

    async def _send_spliced(self, frame: SplicedFrame, writer: asyncio.StreamWriter) -> None:
        """Writes the frame's bytes and `sendfile`s its file regions (page cache to socket) in order, each first as
        far as the socket takes it at once (`_sendfile_now`); closes the regions' files whatever happens. A region
        that sends short (its file shrank) leaves the frame torn, so the connection is closed. Through TLS a region
        is read with one `pread` and written: asyncio's own fallback reads 16 KiB at a time on an executor thread,
        a thread hop per block."""
        loop = asyncio.get_running_loop()
        encrypted = writer.get_extra_info("ssl_object") is not None
        try:
            for part in frame.parts:
                if isinstance(part, FileRegion) and encrypted:
                    data = os.pread(part.file.fileno(), part.length, part.position)
                    if len(data) != part.length:
                        logger.warning("closing a connection: %d of a %d-byte file region read", len(data), part.length)
                        raise ConnectionAbortedError("a file region was read short")
                    writer.write(data)
                elif isinstance(part, FileRegion):
                    await writer.drain()
                    sent = _sendfile_now(writer.transport, part)
                    if sent < part.length:
                        sent += await loop.sendfile(
                            writer.transport, part.file, part.position + sent, part.length - sent
                        )
                    if sent != part.length:
                        logger.warning("closing a connection: %d of a %d-byte file region sent", sent, part.length)
                        raise ConnectionAbortedError("a file region was sent short")
                    self._file_bytes_sent += sent
                else:
                    writer.write(part)
            await writer.drain()
        finally:
            frame.close()

    async def _write_answers(
        self, answers: asyncio.Queue[_Pending | None], writer: asyncio.StreamWriter, context: ConnectionContext
    ) -> None:
        """Writes each request's answer in the order the requests came, until reading ended or a request failed."""
        address = context.client_host
        try:
            while (pending := await answers.get()) is not None:
                task, payload, read_at = pending
                try:
                    response = await task
                finally:
                    self._queue_slots.release()
                self._requests += 1
                if isinstance(response, SplicedFrame):
                    await self._send_spliced(response, writer)
                elif response is not None:
                    writer.write(response)
                    await writer.drain()
                self._answered(payload, read_at)
        except ConnectionError:
            pass
        except AuthenticationFailedError as exc:
            self._authentication_failures += 1
            self._metrics.authentication_failed(context.listener_name)
            logger.warning("closing %s: %s", address, exc.reason)
            await asyncio.sleep(self._security.connection_failed_authentication_delay_ms / 1000)
            with contextlib.suppress(ConnectionError):
                writer.write(exc.frame)
                await writer.drain()
        except ProtocolError as exc:
            logger.warning("closing %s: %s", address, exc)
            self._closed_for_errors += 1
        except Exception:
            logger.exception("closing %s: a request failed inside its handler", address)
            self._closed_for_errors += 1

    def _answered(self, payload: bytes, read_at: float) -> None:
        named = self._request_name(payload)
        if named is not None:
            self._metrics.request_answered(named[0], named[1], (time.perf_counter() - read_at) * 1000)


def _bound_send_buffer(writer: asyncio.StreamWriter, size_bytes: int) -> None:
    """Sets the connection's SO_SNDBUF to `socket.send.buffer.bytes` (-1 leaves the OS's autotuned buffer): see
    `storage.config.listener_config` for why a fetch answer is sent through Kafka's 100 KiB."""
    sock = writer.get_extra_info("socket")
    if sock is None or size_bytes == OS_DEFAULT_BUFFER_BYTES:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size_bytes)


def _sendfile_now(transport: asyncio.WriteTransport, region: FileRegion) -> int:
    """The bytes of `region` the socket takes at once, sent with `os.sendfile` on its non-blocking descriptor while
    the transport holds nothing unsent; the caller sends the rest with asyncio's `loop.sendfile`, which waits for the
    socket. A region smaller than the send buffer (`socket.send.buffer.bytes`, doubled by Linux) goes whole, and a
    larger one starts at once, where asyncio's own path costs a pause and resume of reading and a writer
    registration per region before its first byte. It stops where the file ends (the caller then finds the region
    sent short)."""
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_write_buffer_size():
        return 0
    sent = 0
    try:
        while sent < region.length:
            count = os.sendfile(sock.fileno(), region.file.fileno(), region.position + sent, region.length - sent)
            if count == 0:
                break
            sent += count
    except (BlockingIOError, InterruptedError):
        pass
    return sent


async def _read_exactly(reader: asyncio.StreamReader, size: int, timeout_s: float) -> bytes:
    """`size` bytes, or `TimeoutError` after `timeout_s`. `asyncio.timeout`, not `asyncio.wait_for`: on Python 3.11
    `wait_for` returns the read's bytes when the read completes as the task is cancelled, dropping the cancellation,
    so a connection `stop` cancelled read on and waited for a request slot no answer would free."""
    async with asyncio.timeout(timeout_s):
        return await reader.readexactly(size)
