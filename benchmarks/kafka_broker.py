"""Apache Kafka's own broker on loopback, beside raybroker: fetched from Maven Central once, started in KRaft mode.

The differential tests (tests/cluster/protocol/test_differential.py) and the wire benchmarks
(benchmarks/bench_wire.py) run the same client scenario against both brokers; this module is the Kafka side.
It lives under `benchmarks/` because the benchmarks must import it without the test tree; the test fixture
imports it from here.

`kafka_jars()` resolves `org.apache.kafka:kafka_2.13:<KAFKA_VERSION>` and its runtime dependencies with Maven
(`dependency:copy-dependencies` on a generated minimal pom) into `kafka-<version>/libs` of the download cache
(`cluster.downloads`, which holds Maven's local repository too), once: later calls find the jars there.
`kafka_tools_jar()` adds the jar of Kafka's command-line tools (`kafka-tools`, e.g. kafka-transactions.sh's
`TransactionsCommand`), fetched the same way into `kafka-<version>/tools`.
`artifact_jars(group, artifact, version)` fetches any other Maven artifact with its runtime dependencies the same
way (Kafka Streams, Kafka Connect, kafka-clients of another release) into `maven/<group>/<artifact>-<version>`.
`KafkaNode` is one Kafka process: it formats a fresh KRaft storage dir (broker and controller in one) and runs
`java -cp <jars> kafka.Kafka server.properties` as a subprocess on 127.0.0.1 ports, and stops it (SIGTERM, then
SIGKILL after a bound). `KafkaQuorum` runs nodes as one quorum in a temporary folder on free ports and waits
until an AdminClient lists every broker: `KafkaBroker` one, `benchmarks.kafka_cluster.KafkaCluster` three.
Every step has a time bound and fails with `KafkaUnavailable`, so a machine without Maven, Java or the network
gets one clear message instead of a hang.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Self

from cluster.downloads import cache_root, maven_repository

KAFKA_VERSION = "3.9.1"
# The Kafka 4 release the tests of Kafka 4's protocol run against, as they run Kafka's own tools of that release.
KAFKA_4_VERSION = "4.2.2"
# The newest Kafka release, the oracle of the share-group features later than 4.2 (a group's own delivery count limit,
# Kafka 4.3's; the share groups' dead-letter topic, Kafka 4.4's).
KAFKA_4_4_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
FETCH_TIMEOUT_S = 900.0
FORMAT_TIMEOUT_S = 60.0
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
HEAP = "-Xmx512m"


# Kafka logs to stdout through log4j; WARN keeps its log file small and the errors visible.
_LOG4J = """log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


class KafkaUnavailable(RuntimeError):
    """Apache Kafka could not be fetched, formatted or started here (the message says which step and why)."""


def progress(message: str) -> None:
    print(f"[kafka] {message}", file=sys.stderr, flush=True)


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    """The cache folder of one Kafka version (`libs/` holds its jars once fetched)."""
    return cache_root() / f"kafka-{version}"


def kafka_jars(version: str = KAFKA_VERSION) -> list[Path]:
    """The jars of Kafka's broker, fetched from Maven Central on first use (~50 MB, 57 jars), then from the cache."""
    home = kafka_home(version)
    libs = home / "libs"
    marker = home / "complete"
    if not marker.exists():
        _fetch(
            home,
            [("org.apache.kafka", f"kafka_{SCALA_VERSION}", version), ("org.slf4j", "slf4j-reload4j", "1.7.36")],
            f"org.apache.kafka:kafka_{SCALA_VERSION}:{version} (~50 MB)",
        )
        marker.write_text(version + "\n")
    jars = sorted(libs.glob("*.jar"))
    if not any(jar.name.startswith(f"kafka_{SCALA_VERSION}-") for jar in jars):
        raise KafkaUnavailable(f"{libs} holds no kafka_{SCALA_VERSION} jar; delete {home} to fetch again")
    return jars


def kafka_tools_jar(version: str = KAFKA_VERSION) -> Path:
    """The jar of Kafka's command-line tools (`org.apache.kafka:kafka-tools`: `TransactionsCommand`, behind
    kafka-transactions.sh), fetched from Maven Central on first use (~1 MB, the jar alone: the tools it holds that
    the tests run need nothing beyond `kafka_jars()`), then from the cache."""
    home = kafka_home(version)
    jar = home / "tools" / f"kafka-tools-{version}.jar"
    if not jar.exists():
        run_maven(
            [
                "dependency:copy",
                f"-Dartifact=org.apache.kafka:kafka-tools:{version}",
                f"-DoutputDirectory={home / 'tools'}",
            ],
            f"org.apache.kafka:kafka-tools:{version}",
            home / "tools",
        )
    if not jar.exists():
        raise KafkaUnavailable(f"{jar} is missing after fetching it; delete {home / 'tools'} to fetch again")
    return jar


_POM_DEPENDENCY = """    <dependency>
      <groupId>{}</groupId>
      <artifactId>{}</artifactId>
      <version>{}</version>
    </dependency>
"""


def _pom(dependencies: list[tuple[str, str, str]]) -> str:
    """A minimal pom whose runtime dependencies Maven's `dependency:copy-dependencies` copies: `dependencies`
    (group, artifact, version) and theirs."""
    listed = "".join(_POM_DEPENDENCY.format(*dependency) for dependency in dependencies)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n  <groupId>raybroker</groupId>\n  <artifactId>fetch</artifactId>\n"
        "  <version>1</version>\n  <packaging>pom</packaging>\n"
        f"  <dependencies>\n{listed}  </dependencies>\n</project>\n"
    )


def artifact_jars(group: str, artifact: str, version: str) -> list[Path]:
    """The jars of Maven artifact `group:artifact:version` and of its runtime dependencies, fetched from Maven
    Central on first use into `maven/<group>/<artifact>-<version>/libs` of the download cache, then from there;
    `KafkaUnavailable` when it cannot be fetched."""
    home = cache_root() / "maven" / group / f"{artifact}-{version}"
    libs = home / "libs"
    marker = home / "complete"
    if not marker.exists():
        _fetch(home, [(group, artifact, version)], f"{group}:{artifact}:{version}")
        marker.write_text(version + "\n")
    jars = sorted(libs.glob("*.jar"))
    if not any(jar.name.startswith(f"{artifact}-{version}") for jar in jars):
        raise KafkaUnavailable(f"{libs} holds no {artifact}-{version} jar; delete {home} to fetch again")
    return jars


def _fetch(home: Path, dependencies: list[tuple[str, str, str]], what: str) -> None:
    """Copies the jars of `dependencies` (group, artifact, version) and of their runtime dependencies into
    `home/libs`, emptied first."""
    home.mkdir(parents=True, exist_ok=True)
    libs = home / "libs"
    shutil.rmtree(libs, ignore_errors=True)
    (home / "pom.xml").write_text(_pom(dependencies))
    arguments = ["-f", str(home / "pom.xml"), "dependency:copy-dependencies", "-DincludeScope=runtime"]
    run_maven([*arguments, f"-DoutputDirectory={libs}"], what, libs)


def run_maven(arguments: list[str], what: str, into: Path) -> None:
    """Runs Maven quietly on the download cache's repository to put `what` into `into`, within `FETCH_TIMEOUT_S`,
    reporting progress every 15 s; `KafkaUnavailable` if it cannot."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailable("Maven (mvn) is not installed: cannot fetch Apache Kafka from Maven Central")
    progress(f"fetching {what} from Maven Central into {into}")
    started = time.monotonic()
    command = [mvn, "-B", "-q", f"-Dmaven.repo.local={maven_repository()}", *arguments]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while True:
            try:
                output, _ = process.communicate(timeout=15)
                break
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - started
                if elapsed > FETCH_TIMEOUT_S:
                    process.kill()
                    process.wait()
                    raise KafkaUnavailable(f"fetching {what} took over {FETCH_TIMEOUT_S:.0f} s") from None
                count = len(list(into.glob("*.jar"))) if into.exists() else 0
                progress(f"  still fetching ({elapsed:.0f} s, {count} jars so far)")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise KafkaUnavailable(f"mvn could not fetch {what} (exit {process.returncode}):\n{tail}")
    size_mb = sum(jar.stat().st_size for jar in into.glob("*.jar")) / 1e6
    progress(f"fetched {what}: {size_mb:.1f} MB in {time.monotonic() - started:.0f} s")


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now (the kernel's picks, all bound at once so none repeats)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


class KafkaNode:
    """One Apache Kafka process in `folder`: broker and KRaft controller in one (`process.roles=broker,controller`),
    node `node_id` of a quorum, serving clients on 127.0.0.1:`port` and the quorum on `controller_port`; or, with
    `controller_port` None, a broker alone (`process.roles=broker`) that joins the quorum's voters.

    `start` writes `server.properties` (the quorum's listeners, `log.dirs` = `folder/data`, then `properties`),
    formats the storage with the cluster's id and starts `java -cp <jars> kafka.Kafka` in a session of its own,
    logging to `kafka.log`; `stop` ends that one process (SIGTERM, SIGKILL after `STOP_TIMEOUT_S`).
    """

    def __init__(self, folder: Path, node_id: int, port: int, controller_port: int | None) -> None:
        self.folder = folder
        self.node_id = node_id
        self.port = port
        self.controller_port = controller_port
        self.process: subprocess.Popen[bytes] | None = None
        self._terminated = False

    @property
    def voter(self) -> str:
        """This node as `controller.quorum.voters` names it."""
        return f"{self.node_id}@127.0.0.1:{self.controller_port}"

    @property
    def log_path(self) -> Path:
        return self.folder / "kafka.log"

    def start(self, jars: list[Path], cluster_id: str, voters: str, properties: dict[str, str]) -> None:
        """Formats and starts the node (see the class docstring); does not wait for it to answer."""
        self.folder.mkdir(parents=True, exist_ok=True)
        listeners = f"PLAINTEXT://127.0.0.1:{self.port}"
        if self.controller_port is not None:
            listeners += f",CONTROLLER://127.0.0.1:{self.controller_port}"
        settings = {
            "process.roles": "broker" if self.controller_port is None else "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.folder / "data"),
            **properties,
        }
        config = self.folder / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        log4j = self.folder / "log4j.properties"
        log4j.write_text(_LOG4J)
        java = shutil.which("java")
        if java is None:
            raise KafkaUnavailable("java is not installed: cannot run Apache Kafka")
        classpath = os.pathsep.join(str(jar) for jar in jars)
        base = [java, HEAP, f"-Dlog4j.configuration=file:{log4j}", "-cp", classpath]
        formatted = subprocess.run(
            [*base, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config), "--ignore-formatted"],
            capture_output=True,
            text=True,
            timeout=FORMAT_TIMEOUT_S,
        )
        if formatted.returncode != 0:
            raise KafkaUnavailable(f"Kafka's StorageTool format failed:\n{formatted.stdout}{formatted.stderr}")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [*base, "kafka.Kafka", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def check_running(self) -> None:
        """`KafkaUnavailable` with the tail of its log if the process exited."""
        if self.process is not None and self.process.poll() is not None:
            tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
            raise KafkaUnavailable(f"Kafka node {self.node_id} exited with {self.process.returncode} at start:\n{tail}")

    def terminate(self) -> None:
        """Sends SIGTERM to the one process this node started, if it runs; `stop` waits for it."""
        if self.process is not None and self.process.poll() is None and not self._terminated:
            self.process.send_signal(signal.SIGTERM)
            self._terminated = True

    def stop(self) -> None:
        """SIGTERM (unless `terminate` sent it), SIGKILL if the process is still there after `STOP_TIMEOUT_S`;
        safe to call again."""
        self.terminate()
        process, self.process = self.process, None
        if process is None:
            return
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_answering(bootstrap_servers: str, nodes: list[KafkaNode]) -> None:
    """Waits (up to `START_TIMEOUT_S`) until an AdminClient's metadata lists every node as a broker;
    `KafkaUnavailable` if a node exits meanwhile or the time runs out."""
    from confluent_kafka.admin import AdminClient

    # log_level 0: librdkafka's "connection refused" lines while Kafka starts are expected, not news.
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        for node in nodes:
            node.check_running()
        try:
            if len(admin.list_topics(timeout=2).brokers) >= len(nodes):
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise KafkaUnavailable(f"Kafka did not answer with {len(nodes)} broker(s) within {START_TIMEOUT_S:.0f} s")
        time.sleep(0.2)


class KafkaQuorum:
    """`brokers` `KafkaNode`s on 127.0.0.1 in one temporary folder (`node1`, `node2`, ...), formatted with one
    cluster id, every node a voter of the controller quorum, each with `properties` in its server.properties. Use
    as a context manager, or call `start()` and `stop()`.

    `start` waits until an AdminClient's metadata lists every broker; `stop` sends SIGTERM to every node at once
    (so they shut down side by side rather than each waiting for a quorum that is leaving), waits for each (SIGKILL
    after `STOP_TIMEOUT_S`), and removes the folder. `add_broker` starts one more node, a broker alone, while it
    runs; `restart` starts a lost node again. `KafkaBroker` is one node, `benchmarks.kafka_cluster`'s
    `KafkaCluster` three.
    """

    def __init__(self, brokers: int, properties: dict[str, str], version: str = KAFKA_VERSION) -> None:
        self.brokers = brokers
        self.properties = properties
        self.version = version
        self.folder: Path | None = None
        self.nodes: list[KafkaNode] = []
        self._voters = ""
        self._cluster_id = ""

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [node.process.pid for node in self.nodes if node.process is not None]

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Fetches Kafka if needed, formats and starts every node, and waits until every broker answers."""
        jars = kafka_jars(self.version)
        self.folder = Path(tempfile.mkdtemp(prefix="raybroker-kafka-"))
        ports = free_ports(2 * self.brokers)
        self.nodes = [
            KafkaNode(self.folder / f"node{index + 1}", index + 1, ports[2 * index], ports[2 * index + 1])
            for index in range(self.brokers)
        ]
        self._voters = ",".join(node.voter for node in self.nodes)
        self._cluster_id = new_cluster_id()
        started = time.monotonic()
        try:
            for node in self.nodes:
                node.start(jars, self._cluster_id, self._voters, self.properties)
            wait_until_answering(self.bootstrap_servers, self.nodes)
        except BaseException:
            self.stop()
            raise
        progress(
            f"Kafka {self.version} answers on {self.bootstrap_servers}, {self.brokers} broker(s) "
            f"({time.monotonic() - started:.1f} s)"
        )

    def add_broker(self) -> str:
        """Starts one more node, a broker alone (`process.roles=broker`, the next `node.id`) that joins the running
        quorum, as a broker added to a Kafka cluster; waits until the metadata lists it. The bootstrap servers with
        it."""
        if self.folder is None:
            raise KafkaUnavailable("the cluster is not running: start it before adding a broker")
        node_id = len(self.nodes) + 1
        (port,) = free_ports(1)
        node = KafkaNode(self.folder / f"node{node_id}", node_id, port, None)
        self.nodes.append(node)
        node.start(kafka_jars(self.version), self._cluster_id, self._voters, self.properties)
        wait_until_answering(self.bootstrap_servers, self.nodes)
        progress(f"Kafka broker {node_id} joined on 127.0.0.1:{port}")
        return self.bootstrap_servers

    def restart(self, node: KafkaNode) -> None:
        """Starts `node` again on its folder after its process was lost (a machine back with its disk), and waits
        until the metadata lists every broker again."""
        node.start(kafka_jars(self.version), self._cluster_id, self._voters, self.properties)
        wait_until_answering(self.bootstrap_servers, self.nodes)

    def stop(self) -> None:
        """Stops every node this object started (see the class docstring); safe to call again."""
        for node in self.nodes:
            node.terminate()
        for node in self.nodes:
            node.stop()
        self.nodes = []
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


class KafkaBroker(KafkaQuorum):
    """One Apache Kafka node (broker and KRaft controller) on 127.0.0.1, in a temporary folder.

    `extra_properties` are added to (and override) the server.properties written here, e.g.
    `auto.create.topics.enable`. Use as a context manager, or call `start()` and `stop()`.
    """

    def __init__(self, extra_properties: dict[str, str] | None = None, version: str = KAFKA_VERSION) -> None:
        # One node: the internal topics can have no more than one replica.
        properties = {
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            **(extra_properties or {}),
        }
        super().__init__(1, properties, version)

    @property
    def pid(self) -> int | None:
        return self.pids[0] if self.pids else None


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes in URL-safe base64 without padding (Kafka's Uuid format).
    As Kafka's `Uuid.randomUuid`, never one that starts with '-': StorageTool would read it as an option."""
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


if __name__ == "__main__":
    with KafkaBroker() as broker:
        print(broker.bootstrap_servers)
