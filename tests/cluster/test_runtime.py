"""`cluster.runtime` without a cluster: the TCP probe that keeps `ray.init` from waiting minutes for no GCS."""

from __future__ import annotations

import socket
import time

import pytest

from cluster.runtime import PROBE_TIMEOUT_S, probe, reachable
from storage.errors import BrokerNotAvailableError


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_nothing_listening_fails_at_once_with_a_hint() -> None:
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(BrokerNotAvailableError, match="start one with `raybroker start`"):
        probe(address)
    assert time.monotonic() - started < PROBE_TIMEOUT_S + 1
    assert not reachable(address)


def test_a_listening_port_passes() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert reachable(f"127.0.0.1:{server.getsockname()[1]}")


@pytest.mark.parametrize("address", ["no-port", "host:port", "10.0.0.1:"])
def test_an_address_without_a_port_is_refused(address: str) -> None:
    with pytest.raises(BrokerNotAvailableError, match="expected HOST:PORT"):
        probe(address)


@pytest.mark.parametrize("address", ["local", "ray://10.0.0.1:10001"])
def test_addresses_ray_resolves_itself_are_not_probed(address: str) -> None:
    probe(address)
