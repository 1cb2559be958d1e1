"""DescribeCluster: this listener as the one broker and the controller, in every served version; a request for
the controllers' endpoints is refused as a Kafka broker refuses it."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.handlers.cluster import DESCRIBE_CLUSTER_KEY, DescribeClusterHandler
from cluster.protocol.router import SERVED
from cluster.protocol.views.broker_view import BrokerEndpoint
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from tests.cluster.protocol.helpers import answer, run

ENDPOINT = BrokerEndpoint(3, "127.0.0.1", 19092)
VERSIONS = range(SERVED[DESCRIBE_CLUSTER_KEY].min_version, SERVED[DESCRIBE_CLUSTER_KEY].max_version + 1)
REQUEST = {"include_cluster_authorized_operations": False, "endpoint_type": 1, "include_fenced_brokers": False}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_listener_is_the_controller_and_every_announced_listener_a_broker(
    view: InProcessBrokerView, version: int
) -> None:
    response = answer(DescribeClusterHandler(view, ENDPOINT), DESCRIBE_CLUSTER_KEY, version, REQUEST)
    assert (response.error_code, response.cluster_id, response.controller_id) == (
        ErrorCode.none,
        view.broker.controller.cluster_id(),
        3,
    )
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(3, "127.0.0.1", 19092)]
    run(view.announce(BrokerEndpoint(1, "node-b", 9092)))
    response = answer(DescribeClusterHandler(view, ENDPOINT), DESCRIBE_CLUSTER_KEY, version, REQUEST)
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(1, "node-b", 9092), (3, "127.0.0.1", 19092)]


def test_asking_for_controllers_is_unsupported(view: InProcessBrokerView) -> None:
    values = REQUEST | {"endpoint_type": 2}
    response = answer(DescribeClusterHandler(view, ENDPOINT), DESCRIBE_CLUSTER_KEY, 1, values)
    assert (response.error_code, list(response.brokers)) == (ErrorCode.unsupported_endpoint_type, [])
