"""A blocking Kafka protocol connection, one request at a time: what raybroker's tools use to speak to any Kafka
broker over its listener (`raybroker transactions --abort --bootstrap-server`), and what the differential tests
use to send the same request to raybroker and to Apache Kafka.

Requests are described as plain values (nested dicts and lists, `cluster.protocol.messages.build`) for one API key
and version, framed with `cluster.protocol.framing.encode_request`, and the answer decoded with kio's response class
of that version. A peer that closes the connection, or stays silent past `timeout_s`, raises
`BrokerNotAvailableError` (`ConnectionClosedError`); an answer that does not decode raises `MalformedFrameError`.
Nothing the peer sends is evaluated: its bytes only go through kio's decoders.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema

from cluster.protocol.framing import SIZE, decode_response, encode_request
from cluster.protocol.messages import build
from storage.closeable import Closeable
from storage.errors import BrokerNotAvailableError, InvalidRequestError

# A response larger than this is refused rather than buffered (Kafka's clients bound it by `receive.buffer.bytes`
# and the answers they ask for; an admin answer here is a few KiB).
MAX_RESPONSE_BYTES = 100 * 1024 * 1024


class ConnectionClosedError(BrokerNotAvailableError):
    """The broker closed the connection, or did not answer within the timeout."""


def parse_address(address: str) -> tuple[str, int]:
    """(host, port) of a `HOST:PORT` (the first of a comma-separated bootstrap list); `InvalidRequestError` for
    anything else."""
    first = address.split(",")[0].strip()
    host, found, port = first.rpartition(":")
    if not found or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidRequestError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


class WireClient(Closeable):
    """One connection to a Kafka broker (see the module docstring). Use as a context manager, or call `close`."""

    def __init__(self, address: str, *, timeout_s: float = 30.0, client_id: str = "raybroker") -> None:
        host, port = parse_address(address)
        self.address = f"{host}:{port}"
        self._client_id = client_id
        self._correlation_id = 0
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise ConnectionClosedError(f"cannot connect to {self.address}: {exc}") from exc

    def close(self) -> None:
        self._sock.close()

    def send_raw(self, payload: bytes) -> None:
        """Writes `payload` as one frame, whatever it holds (the tests' garbage)."""
        try:
            self._sock.sendall(SIZE.pack(len(payload)) + payload)
        except OSError as exc:
            raise ConnectionClosedError(f"{self.address} closed the connection: {exc}") from exc

    def request(self, api_key: int, version: int, values: Mapping[str, Any]) -> Any:
        """The kio response of `version` to the request of `api_key`/`version` built from `values`."""
        return self.receive(api_key, version, self.send(api_key, version, values))

    def send(self, api_key: int, version: int, values: Mapping[str, Any]) -> int:
        """Sends the request of `api_key`/`version` built from `values` without reading its answer (`receive` does);
        its correlation id."""
        body = build(load_request_schema(api_key, version), values)
        self._correlation_id += 1
        try:
            self._sock.sendall(encode_request(api_key, self._correlation_id, self._client_id, body))
        except OSError as exc:
            raise ConnectionClosedError(f"{self.address} closed the connection: {exc}") from exc
        return self._correlation_id

    def receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        """The kio response of `version` to the request of `api_key` sent as `correlation_id`, the next answer."""
        answered, response = decode_response(self.read_frame(), load_response_schema(api_key, version))
        if answered != correlation_id:
            raise ConnectionClosedError(f"{self.address} answered correlation id {answered}, not {correlation_id}")
        return response

    def read_frame(self) -> bytes:
        """The payload of the next frame; `ConnectionClosedError` if the peer closes first or stays silent."""
        (size,) = SIZE.unpack(self._exactly(SIZE.size))
        if not 0 <= size <= MAX_RESPONSE_BYTES:
            raise ConnectionClosedError(f"{self.address} sent a frame of {size} bytes")
        return self._exactly(size)

    def _exactly(self, count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            try:
                chunk = self._sock.recv(count - len(data))
            except OSError as exc:
                raise ConnectionClosedError(f"{self.address}: {exc}") from exc
            if not chunk:
                raise ConnectionClosedError(f"{self.address} closed the connection")
            data += chunk
        return bytes(data)
