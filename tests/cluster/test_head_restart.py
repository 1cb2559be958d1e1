"""Losing the Ray head: `raybroker start`'s head keeps its GCS state in RocksDB (`cluster.gcs_storage`), so while
every process of the head is gone a worker node's broker goes on acknowledging writes to the partitions it leads,
and `raybroker start` run again on the head's machine resumes the same cluster, also on an empty disk (the controller
takes the metadata log's copy the worker's broker keeps): the controller answers again, and the worker's broker and
listener register again with it.

A real cluster of `ray start` nodes on this machine, as `ray_cluster.yaml` starts them (`benchmarks.lost_head`,
which the `head_loss_stall_s` benchmark shares): the head through `raybroker start` (in a TMPDIR of its own, so its
state file and Ray's session folders are the test's), a worker node with `ray start --address` and the reconnect
timeout `cluster.gcs_storage.WORKER_ENVIRONMENT` sets, its broker started in a task pinned there. The client is
confluent-kafka (librdkafka) through the worker's listener. The head is lost as a machine is: SIGKILL to its
gcs_server, raylet, daemons and every process the raylet started.

The module owns Ray (`OWNS_RAY`): it runs after every other module, once the session's own Ray cluster is shut down,
so that the times it measures (issue 44's goals) are those of this cluster alone on the machine.

Both nodes run on one machine, which Ray's `ray start --head` takes for a head already running when its
`ray_current_cluster` file names the address a local raylet (the worker's) points at; the file is removed before the
head starts again, as a new head machine would not have it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from benchmarks.lost_head import (
    WORKER_BROKER,
    cli_environment,
    head_processes,
    kill_all,
    ray_environment,
    session_processes,
    started_head,
    worker_node_command,
)
from cluster.gcs_storage import WORKER_ENVIRONMENT
from tests.actors.support import release_session_ray, wait_for
from tests.cluster.cli_shell import REPO_ROOT, require_free_head_port, run_shell
from tests.reliability.modes import LONG

pytestmark = pytest.mark.ray
OWNS_RAY = True

TOPIC = "head-loss"
# A group's committed offset and a transactional producer's topic, written before the head's loss and after.
GROUP = "head-loss-group"
TXN_TOPIC = "head-loss-txn"
TRANSACTIONAL_ID = "head-loss-txn"
# Issue 44's goals: the longest gap between acknowledged writes to a worker-led partition while the head is lost,
# and the time from the head's return until an admin call, a group offset commit and a transaction succeed.
MAX_GAP_S = 10.0
MAX_BACK_S = 30.0
SEND_INTERVAL_S = 0.02


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Head:
    """The test's private TMPDIR, its environment for the CLI, and the head's log dir."""

    root: Path
    env: dict[str, str]
    log_dir: Path
    listener_port: int = field(default_factory=free_port)
    nodes: set[str] = field(default_factory=set)
    # Whether the test left no cluster behind (it stopped it, or its start failed): the fixture then stops nothing.
    stopped: bool = False

    def raybroker(self, *args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        command = " ".join(["raybroker", *args])
        return run_shell(command, timeout_s=timeout_s, env=self.env)

    def start(self) -> subprocess.CompletedProcess[str]:
        """`raybroker start` of the head; the Ray node its broker runs on is noted in `nodes`."""
        started = self.raybroker(
            "start",
            "--log-dirs",
            str(self.log_dir),
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{self.listener_port}",
            # Two brokers (the worker's gets the same): with Kafka's 2, a transaction needs both, and one of them is
            # lost (Kafka's three brokers keep two in sync).
            "--override",
            "transaction.state.log.min.isr=1",
        )
        if started.returncode == 0:
            self.nodes.add(started_head(started.stdout)[1])
        return started

    def session_processes(self) -> list[psutil.Process]:
        """Every process of this test's Ray cluster (`benchmarks.lost_head.session_processes`)."""
        return session_processes(self.root, self.nodes)


@pytest.fixture(scope="module", autouse=True)
def _own_ray() -> None:
    release_session_ray()


@pytest.fixture
def head() -> Iterator[Head]:
    require_free_head_port()
    # Short: Ray's unix sockets live under it, and a socket path has at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="rbh-", dir="/tmp"))
    env = cli_environment(root)
    state = Head(root, env, root / "head")
    try:
        yield state
    finally:
        if not state.stopped:
            with contextlib.suppress(subprocess.TimeoutExpired):
                state.raybroker("stop", timeout_s=120)
        leftover = state.session_processes()
        for proc in leftover:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(leftover, timeout=10)
        shutil.rmtree(root, ignore_errors=True)


class Writer:
    """An idempotent acks=all confluent-kafka producer writing `value-<i>` to one partition every
    `SEND_INTERVAL_S`, from a thread, until `stop`; it notes when each record was acknowledged."""

    def __init__(self, bootstrap: str, partition: int) -> None:
        from confluent_kafka import Producer

        self.partition = partition
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 120000}
        )
        self.sent: list[bytes] = []
        self.acked_at: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error: Any, _message: Any) -> None:
        if error is None:
            self.acked_at.append(time.monotonic())
        else:
            self.errors.append(str(error))

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            value = f"value-{index}".encode()
            self.producer.produce(TOPIC, value=value, partition=self.partition, on_delivery=self._delivered)
            self.sent.append(value)
            self.producer.poll(SEND_INTERVAL_S)
            index += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(120) == 0

    def longest_gap_s(self, since: float) -> float:
        times = [since, *(at for at in self.acked_at if at >= since)]
        return max(later - earlier for earlier, later in itertools.pairwise(times))


def read_back(
    bootstrap: str, topic: str, partition: int, count: int, isolation: str = "read_uncommitted"
) -> list[bytes]:
    """The first `count` values of the partition, read from offset 0 at isolation level `isolation`."""
    from confluent_kafka import Consumer, TopicPartition

    settings = {"bootstrap.servers": bootstrap, "group.id": "head-loss", "isolation.level": isolation}
    consumer = Consumer({**settings, "enable.auto.commit": False})
    read: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 60
        while len(read) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                read.append(message.value())
    finally:
        consumer.close()
    return read


def started_since(head: Head, earlier: set[int]) -> list[psutil.Process]:
    """The head's processes started since `earlier` (the pids of the cluster's processes then, the head being
    lost): every process of the cluster but those and what a raylet among them started since (the worker's)."""
    worker_side = set(earlier)
    for proc in head.session_processes():
        if proc.pid in earlier and proc.name() == "raylet":
            with contextlib.suppress(psutil.Error):
                worker_side.update(child.pid for child in proc.children(recursive=True))
    return [proc for proc in head.session_processes() if proc.pid not in worker_side]


def metadata_answers(bootstrap: str) -> tuple[object, ...]:
    """What the cluster's metadata says, asked through the listener at `bootstrap` (Kafka's Admin client): the test
    topic's id, partition count and retention, and the SCRAM users with their mechanisms."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (described,) = admin.describe_topics(TopicCollection([TOPIC])).values()
    topic = described.result(timeout=30)
    (configs,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, TOPIC)]).values()
    retention = configs.result(timeout=30)["retention.ms"].value
    users = admin.describe_user_scram_credentials().result(timeout=30)
    mechanisms = {user: [info.mechanism.name for info in found.scram_credential_infos] for user, found in users.items()}
    return str(topic.topic_id), len(topic.partitions), retention, mechanisms


def internal_topics_in_sync_on_both(bootstrap: str) -> bool:
    """Whether `__consumer_offsets` and `__transaction_state`, which the head's broker created alone, grew onto the
    worker's broker: each partition with two replicas in sync."""
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    internal = [topics.get("__consumer_offsets"), topics.get("__transaction_state")]
    return all(topic is not None and all(len(p.isrs) == 2 for p in topic.partitions.values()) for topic in internal)


def create_topic(bootstrap: str, name: str) -> None:
    """Creates the topic `name` (one partition, one replica) through the listener at `bootstrap`; a topic that exists
    already (an earlier try's request done, its answer lost) counts as created."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (created,) = admin.create_topics([NewTopic(name, 1, 1)]).values()
    try:
        created.result(timeout=60)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def commit_offset(bootstrap: str, offset: int) -> None:
    """Commits `offset` for partition 0 of the test topic as `GROUP`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def committed_offset(bootstrap: str) -> int:
    """`GROUP`'s committed offset of partition 0 of the test topic."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        (committed,) = consumer.committed([TopicPartition(TOPIC, 0)], timeout=30)
        return int(committed.offset)
    finally:
        consumer.close()


def commit_transaction(bootstrap: str, value: bytes) -> None:
    """One transaction of `TRANSACTIONAL_ID` writing `value` to `TXN_TOPIC`, committed."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(TXN_TOPIC, value=value, partition=0)
    producer.commit_transaction(60)


def succeeds(attempt: Any, timeout_s: float, what: str) -> Any:
    """`attempt()`'s answer once it stops raising Kafka's errors (COORDINATOR_NOT_AVAILABLE while a coordinator comes
    back, which librdkafka does not flag retriable), within `timeout_s`."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: {exc}") from exc
            time.sleep(0.5)


def run_to_end(command: list[str], env: dict[str, str]) -> str:
    """`command` run from the repository with `env`, which must succeed; what it printed."""
    ran = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return ran.stdout


def test_a_lost_head_started_again_on_an_empty_disk_resumes_the_cluster_while_a_worker_serves(
    head: Head,
) -> None:
    """The head is lost with its disk: started again on an empty one, its controller finds the cluster's metadata in
    the worker broker's copy of the metadata log (`metadata.replication.factor`): the topic with its id and config
    and the SCRAM user are known again (ACLs, records of the same log, are checked by the plain controller's tests),
    and a topic is created through the worker's listener. The group's committed offset and the committed
    transaction outlive the head's disk too (`__consumer_offsets` and `__transaction_state` grew onto the worker's
    broker when it joined), and a commit and a transaction succeed again. The long mode
    (`RAYBROKER_RELIABILITY=long`) first loses the head and starts it again on its own disk."""
    from confluent_kafka.admin import (
        AdminClient,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    started = head.start()
    assert started.returncode == 0, started.stderr[-2000:]
    storage = head.root / "head-ray-gcs"
    assert f"The head's GCS keeps the cluster's state: RocksDB in {storage}." in started.stdout
    address = started_head(started.stdout)[0]
    (head_node,) = head.nodes
    daemons = head.session_processes()
    ray_env = ray_environment(head.env)
    run_to_end([*worker_node_command(address), "--disable-usage-stats"], ray_env)
    worker_port = free_port()
    worker_broker = [sys.executable, "-c", WORKER_BROKER, address, str(head.root / "worker"), str(worker_port), "1"]
    # Two brokers (see `Head.start`): a transaction needs one in sync.
    worker_broker += ["transaction.state.log.min.isr=1", "--", head_node]
    worker_bootstrap = run_to_end(worker_broker, {**ray_env, "PYTHONPATH": str(REPO_ROOT)}).split()[-1]
    worker_admin = AdminClient({"bootstrap.servers": worker_bootstrap})
    kept = NewTopic(TOPIC, 4, 1, config={"retention.ms": "3600000"})
    worker_admin.create_topics([kept])[TOPIC].result(timeout=60)
    alice = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"secret")
    for done in worker_admin.alter_user_scram_credentials([alice]).values():
        done.result(timeout=30)
    metadata_before = metadata_answers(worker_bootstrap)
    assert metadata_before[1:] == (4, "3600000", {"alice": ["SCRAM_SHA_256"]})
    worker_admin.create_topics([NewTopic(TXN_TOPIC, 1, 2)])[TXN_TOPIC].result(timeout=60)
    commit_offset(worker_bootstrap, 7)
    commit_transaction(worker_bootstrap, b"before")
    wait_for(lambda: internal_topics_in_sync_on_both(worker_bootstrap), 60, "the internal topics on both brokers")
    metadata = worker_admin.list_topics(TOPIC, timeout=30)
    partition = next(p for p, state in metadata.topics[TOPIC].partitions.items() if state.leader == 1)

    writer = Writer(worker_bootstrap, partition)
    wait_for(lambda: len(writer.acked_at) >= 50, 60, "the first acknowledgements")
    lost = head_processes(daemons)
    assert any(proc.name() == "gcs_server" for proc in lost) and any(proc.name() == "raylet" for proc in lost)
    kill_all(lost)
    lost_at = time.monotonic()
    acked_before = len(writer.acked_at)
    wait_for(lambda: len(writer.acked_at) >= acked_before + 50, 30, "acknowledgements with the head gone")

    if LONG:
        # The long mode first starts the head again on its disk, then loses it once more.
        (head.root / "ray" / "ray_current_cluster").unlink(missing_ok=True)
        while_lost = {proc.pid for proc in head.session_processes()}
        again = head.start()
        assert again.returncode == 0, again.stderr[-2000:]
        assert f"Resuming the Ray cluster whose state the GCS kept in {storage}." in again.stdout
        head_admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{head.listener_port}"})
        head_admin.create_topics([NewTopic("after-head-loss", 1, 1)])["after-head-loss"].result(timeout=60)
        # The worker's broker and listener register with the controller started again (heartbeats, announcements).
        wait_for(lambda: 1 in head_admin.list_topics(timeout=30).brokers, 30, "the worker's listener registered")
        assert metadata_answers(worker_bootstrap) == metadata_before
        lost = head_processes(started_since(head, while_lost))
        assert any(proc.name() == "gcs_server" for proc in lost) and any(proc.name() == "raylet" for proc in lost)
        kill_all(lost)
        acked_before = len(writer.acked_at)
        wait_for(lambda: len(writer.acked_at) >= acked_before + 50, 30, "acknowledgements with the head gone again")

    shutil.rmtree(head.log_dir)
    (head.root / "ray" / "ray_current_cluster").unlink(missing_ok=True)
    restarted_at = time.monotonic()
    back_after: dict[str, float] = {}

    def back(what: str) -> None:
        back_after[what] = time.monotonic() - restarted_at

    with concurrent.futures.ThreadPoolExecutor(1) as restarting:
        restart = restarting.submit(head.start)
        # Clients go on through the worker's listener while `raybroker start` runs: they are back as soon as the
        # controller started again answers, not when the command has printed its last line.
        succeeds(lambda: create_topic(worker_bootstrap, "after-disk-loss"), 60, "a topic created")
        back("create-topic")
        assert succeeds(lambda: committed_offset(worker_bootstrap), 60, "the group's offset") == 7
        back("offset-read")
        succeeds(lambda: commit_offset(worker_bootstrap, 9), 30, "a group offset commit")
        back("offset-commit")
        succeeds(lambda: commit_transaction(worker_bootstrap, b"after"), 30, "a transaction")
        back("transaction")
        on_empty_disk = restart.result(timeout=180)
        back("start")
    assert on_empty_disk.returncode == 0, on_empty_disk.stderr[-2000:]
    assert f"Resuming the Ray cluster whose state the GCS kept in {storage}." in on_empty_disk.stdout
    # Through the worker's listener: the metadata as it was.
    assert metadata_answers(worker_bootstrap) == metadata_before
    back_s = max(took for what, took in back_after.items() if what != "start")
    writer.stop()
    # The group's coordinator may move again meanwhile (its partition's leadership settling as the head's broker
    # rejoins): the read is retried as the ones above, and must still find the commit.
    assert succeeds(lambda: committed_offset(worker_bootstrap), 30, "the group's offset after the commit") == 9
    assert read_back(worker_bootstrap, TXN_TOPIC, 0, 2, "read_committed") == [b"before", b"after"]

    assert writer.errors == []
    gap_s = writer.longest_gap_s(lost_at)
    print(
        f"head lost: longest gap between acknowledgements {gap_s:.2f} s; admin, group commit and transaction back "
        f"{back_s:.1f} s after restart (at {', '.join(f'{what} {took:.1f} s' for what, took in back_after.items())})"
    )
    assert gap_s <= MAX_GAP_S
    assert back_s <= MAX_BACK_S
    assert read_back(worker_bootstrap, TOPIC, partition, len(writer.sent)) == writer.sent
    stopped = head.raybroker("stop", timeout_s=120)
    assert stopped.returncode == 0, stopped.stderr
    assert not storage.exists(), "a clean stop ends the cluster: its GCS state is discarded"
    assert head.session_processes() == [], "raybroker stop leaves no process of the cluster behind"
    head.stopped = True


def test_a_start_whose_cluster_fails_to_start_leaves_nothing_to_resume(head: Head) -> None:
    """The new head's broker cannot serve (its listener's port is taken): `raybroker start` fails with one line, and
    its head, its state file and its GCS folder are gone, so the next `start` begins afresh rather than resuming."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        head.listener_port = taken.getsockname()[1]
        failed = head.start()
    assert failed.returncode == 1, failed.stdout[-2000:]
    assert "Resuming" not in failed.stdout
    assert not (head.root / "head-ray-gcs").exists()
    assert not (head.root / f"raybroker-{os.getuid()}" / "cli-state.json").exists()
    assert head.session_processes() == []
    head.stopped = True


def test_ray_cluster_yaml_starts_the_head_and_workers_as_raybroker_start_does() -> None:
    """The launcher config's head keeps its GCS in RocksDB and every node waits for a lost head as long as
    `cluster.gcs_storage` has them."""
    config = yaml.safe_load((REPO_ROOT / "ray_cluster.yaml").read_text(encoding="utf-8"))
    head_start = next(line for line in config["head_start_ray_commands"] if "ray start --head" in line)
    worker_start = next(line for line in config["worker_start_ray_commands"] if "ray start --address" in line)
    assert "RAY_gcs_storage=rocksdb" in head_start and "RAY_gcs_storage_path=/" in head_start
    for line in (head_start, worker_start):
        for name, value in WORKER_ENVIRONMENT.items():
            assert f"{name}={value}" in line
