"""Monitoring end to end: a real Prometheus server (Debian's package) scrapes the metrics agents of a two-node Ray
cluster running a broker on each node, with the scrape config of `configs/prometheus.yml`, and its HTTP query API
must show what Kafka clients did: the records and bytes produced and consumed (oracle: the counts sent and the
segment files on disk), request counts, a consumer group's lag falling to zero once it has committed everything, a
group name of quotes, backslashes and a newline passing through the exposition format, every dashboard query
accepted, and a removed node as under-replicated and offline partitions, which `raybroker status` reports with
exit code 1.

Ray reports metrics every second here (`metrics_report_interval_ms`, 10 s by default) and declares a removed node
dead within ~5-10 s (`SYSTEM_CONFIG`); Prometheus scrapes every second.
This module owns its Ray cluster (`OWNS_RAY`: it runs after the tests that share the session's Ray). Without the
`prometheus` binary it skips (and fails under `.ci/run`, which installs it)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from prometheus_client.parser import text_string_to_metric_families
from ray.cluster_utils import Cluster

from actors.clients.admin import Admin
from actors.clients.broker import Broker, stop_broker
from actors.clients.consumer import Consumer
from cluster.cli.main import EXIT_DATA_ERROR, EXIT_OK, main
from cluster.protocol.listener_actor import start_kafka_listeners
from storage.config.broker_config import BrokerConfig
from storage.errors import BrokerNotAvailableError
from tests.actors.support import release_session_ray, start_broker_on
from tests.conftest import skip_or_fail
from tests.test_monitoring_configs import SCRAPE_CONFIG, dashboard_expressions

pytestmark = pytest.mark.ray
OWNS_RAY = True

NODE_ARGS = {"num_cpus": 1, "object_store_memory": 128 * 1024 * 1024}
# The head's metrics agent on a free port rather than Ray's fixed 52365 (worker nodes of a `Cluster` get free ones):
# another Ray head on this machine holds 52365, and an agent that cannot bind it takes its raylet down at startup.
HEAD_ARGS = {**NODE_ARGS, "include_dashboard": False, "dashboard_agent_listen_port": None}
SYSTEM_CONFIG = {
    "metrics_report_interval_ms": 1000,
    # A removed node is declared dead after 5 missed checks a second apart (Ray's default: 5 checks 3 s apart).
    # Shorter checks, as the replication tests use (0.3 s, 3 misses), declared a live node dead
    # with other work running.
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 2000,
    "health_check_failure_threshold": 5,
}
# Partition hosts as by default, without a spare started ahead on each node (what is measured is not creation).
BROKER_SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "log.initial.task.delay.ms": "200",
    "log.partitions.spare.processes": "0",
}
# A value reaches Prometheus within ~4 s here (1 s export, 1 s Ray report, 1 s scrape): far less than this.
DEADLINE_S = 45.0
RECORDS = 2000
VALUE_BYTES = 100
WEIRD_GROUP = 'ops "team"\\eu\nwest'


@dataclass
class Monitored:
    """The cluster, its worker node (removed by the last test), every node's log dirs, each node's metrics URL,
    and the Kafka listener's bootstrap servers."""

    cluster: Cluster
    worker: Any
    worker_node: str
    log_dirs: list[Path]
    metrics_urls: dict[str, str]
    bootstrap: str


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitored]:
    release_session_ray()
    os.environ["RAY_LOG_TO_DRIVER"] = "0"
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**HEAD_ARGS, "_system_config": SYSTEM_CONFIG},
    )
    try:
        worker = cluster.add_node(**NODE_ARGS)
        ray.init(address=cluster.address, namespace="raybroker", log_to_driver=False, logging_level="ERROR")
        cluster.wait_for_nodes()
        head = ray.get_runtime_context().get_node_id()
        root = tmp_path_factory.mktemp("monitoring")
        log_dirs = []
        for index, node in enumerate([head, worker.node_id]):
            log_dirs.append(root / f"node{index}")
            properties = {**BROKER_SETTINGS, "log.dirs": str(log_dirs[-1]), "node.id": str(index)}
            start_broker_on(node, properties)
        config = BrokerConfig.from_properties({**BROKER_SETTINGS, "listeners": "PLAINTEXT://127.0.0.1:0"})
        listeners = start_kafka_listeners(config, head)
        urls = {n["NodeID"]: f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for n in ray.nodes() if n["Alive"]}
        yield Monitored(cluster, worker, worker.node_id, log_dirs, urls, listeners.bootstrap_servers)
        with contextlib.suppress(BrokerNotAvailableError):
            stop_broker()
    finally:
        ray.shutdown()
        cluster.shutdown()


class Prometheus:
    """A Prometheus server in a subprocess on a free 127.0.0.1 port, with its own config and data folder."""

    def __init__(self, folder: Path, targets: list[str]) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            skip_or_fail("Debian's prometheus package is not installed (`apt-get install prometheus`)")
        config = yaml.safe_load(SCRAPE_CONFIG.read_text(encoding="utf-8"))
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [str(SCRAPE_CONFIG.parent / name) for name in config["rule_files"]]
        config["scrape_configs"][0]["static_configs"] = [{"targets": targets}]
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self._log = (folder / "prometheus.log").open("wb")
        self._process = subprocess.Popen(
            [
                binary,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + DEADLINE_S
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as answer,
            ):
                if answer.status == 200:
                    return
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"Prometheus did not start: {(folder / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector; raises if Prometheus refuses the expression."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The single value of a query (None while it has no result yet)."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


@pytest.fixture(scope="module")
def prometheus(monitored: Monitored, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), sorted(monitored.metrics_urls.values()))
    try:
        yield server
    finally:
        server.stop()


def eventually(read: Callable[[], Any], expected: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    last = None
    while time.monotonic() < deadline:
        last = read()
        if last == expected:
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: {last!r}, expected {expected!r}")


def log_bytes_on_disk(monitored: Monitored, topic: str) -> int:
    return sum(path.stat().st_size for root in monitored.log_dirs for path in root.glob(f"{topic}-*/*.log"))


def test_counters_and_lag_match_what_kafka_clients_did(monitored: Monitored, prometheus: Prometheus) -> None:
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import Producer, TopicPartition

    Admin().create_topic("traffic", partitions=2)
    producer = Producer({"bootstrap.servers": monitored.bootstrap, "linger.ms": 5})
    for index in range(RECORDS):
        producer.produce("traffic", os.urandom(VALUE_BYTES), key=b"%d" % index)
    assert producer.flush(DEADLINE_S) == 0
    consumer = KafkaConsumer(
        {"bootstrap.servers": monitored.bootstrap, "group.id": "monitoring", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("traffic", p, 0) for p in range(2)])
    positions = {0: 0, 1: 0}
    deadline = time.monotonic() + DEADLINE_S
    while sum(positions.values()) < RECORDS and time.monotonic() < deadline:
        for message in consumer.consume(500, 0.5):
            assert message.error() is None
            positions[message.partition()] = message.offset() + 1
    assert sum(positions.values()) == RECORDS
    # Half of partition 0 committed first: the lag is what is left of it.
    half = positions[0] // 2
    consumer.commit(
        offsets=[TopicPartition("traffic", 0, half), TopicPartition("traffic", 1, positions[1])], asynchronous=False
    )

    on_disk = log_bytes_on_disk(monitored, "traffic")
    eventually(
        lambda: prometheus.value('sum(kafka_server_brokertopicmetrics_messagesin_total{topic="traffic"})'),
        RECORDS,
        "messages in",
    )
    assert prometheus.value('sum(kafka_server_brokertopicmetrics_bytesin_total{topic="traffic"})') == on_disk
    eventually(
        lambda: prometheus.value('sum(kafka_server_brokertopicmetrics_bytesout_total{topic="traffic"})'),
        on_disk,
        "bytes out",
    )
    eventually(lambda: prometheus.value('sum(kafka_log_log_size{topic="traffic"})'), on_disk, "log size")
    eventually(lambda: prometheus.value('sum(kafka_log_log_logendoffset{topic="traffic"})'), RECORDS, "log end offsets")
    eventually(
        lambda: prometheus.value('sum(kafka_consumergroup_lag{consumergroup="monitoring",topic="traffic"})'),
        positions[0] - half,
        "lag",
    )
    # The broker-wide series (topic="", no label once in Prometheus) is the sum of the per-topic ones.
    assert prometheus.value('sum(kafka_server_brokertopicmetrics_messagesin_total{topic=""})') == prometheus.value(
        'sum(kafka_server_brokertopicmetrics_messagesin_total{topic!=""})'
    )
    produces = prometheus.value('sum(kafka_network_requestmetrics_requests_total{request="Produce"})')
    assert produces and produces == prometheus.value(
        'sum(kafka_network_requestmetrics_totaltimems_count{request="Produce"})'
    )
    assert prometheus.value('sum(kafka_server_socket_server_metrics_connection_count{listener="PLAINTEXT"})') >= 1

    consumer.commit(offsets=[TopicPartition("traffic", 0, positions[0])], asynchronous=False)
    consumer.close()
    eventually(lambda: prometheus.value('sum(kafka_consumergroup_lag{consumergroup="monitoring"})'), 0, "lag caught up")
    for expr in dashboard_expressions():
        prometheus.query(expr.replace("$__rate_interval", "1m"))


def test_a_group_name_with_quotes_backslashes_and_a_newline_keeps_the_exposition_whole(
    monitored: Monitored, prometheus: Prometheus
) -> None:
    consumer = Consumer(group_id=WEIRD_GROUP)
    try:
        consumer.commit({("traffic", 0): 1})
    finally:
        consumer.close()
    end = Broker.connect().partition("traffic", 0)
    high_watermark = ray.get(end.offsets.remote())[1]
    head = ray.get_runtime_context().get_node_id()

    def scraped_lag() -> float | None:
        with urllib.request.urlopen(f"http://{monitored.metrics_urls[head]}/metrics", timeout=10) as answer:
            text = answer.read().decode("utf-8")
        # The parser refuses a broken exposition, and every family of the endpoint must parse.
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "ray_kafka_consumergroup_lag" and sample.labels["consumergroup"] == WEIRD_GROUP:
                    return sample.value
        return None

    eventually(scraped_lag, high_watermark - 1, "the weird group's lag on the endpoint")
    selector = f"kafka_consumergroup_lag{{consumergroup={json.dumps(WEIRD_GROUP)}}}"
    eventually(lambda: prometheus.value(f"sum({selector})"), high_watermark - 1, "the weird group's lag in Prometheus")
    (series,) = prometheus.query(selector)
    assert series["metric"]["consumergroup"] == WEIRD_GROUP


def test_a_removed_node_shows_as_under_replicated_and_offline_and_status_exits_1(
    monitored: Monitored, prometheus: Prometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = Admin()
    admin.create_topic("replicated", partitions=2, replication_factor=2)
    alone = admin.describe_topic("traffic")
    assert main(["status"]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[-1] == "Status: OK"
    eventually(lambda: prometheus.value("sum(kafka_server_replicamanager_underreplicatedpartitions)"), 0, "healthy")
    shrinks_before = prometheus.value("sum(kafka_server_replicamanager_isrshrinks_total)") or 0
    # The internal topics the head's broker created alone grew onto the worker when it joined (their factor, 3, is
    # capped at the two brokers).
    internal = [admin.describe_topic(name) for name in admin.list_topics(include_internal=True) if name[:2] == "__"]
    assert {topic.replication_factor for topic in internal} == {2}
    # Oracle: every partition with two replicas (the two-replica topic's, the internal topics') loses one; a
    # one-replica partition on the worker its only one.
    replicated = 2 + sum(len(topic.partitions) for topic in internal)
    offline = sum(1 for p in alone.partitions if p.node_id == monitored.worker_node)
    assert offline >= 1

    monitored.cluster.remove_node(monitored.worker, allow_graceful=False)

    eventually(
        lambda: prometheus.value("sum(kafka_server_replicamanager_underreplicatedpartitions)"),
        replicated,
        "under-replicated",
    )
    eventually(
        lambda: prometheus.value("sum(kafka_controller_kafkacontroller_offlinepartitionscount)"), offline, "offline"
    )
    assert (prometheus.value("sum(kafka_server_replicamanager_isrshrinks_total)") or 0) - shrinks_before >= replicated
    assert main(["status"]) == EXIT_DATA_ERROR
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"Status: OFFLINE ({offline} partition{'s' if offline > 1 else ''} without a leader)"
    assert "Under-replicated partitions:" in lines
