"""Apache Kafka's own kafka-reassign-partitions.sh moving partitions while a librdkafka producer writes, on raybroker
across Ray nodes and on a multi-broker Apache Kafka 3.9.1, the same scenarios and checks on both.

raybroker runs as the replicated benchmarks run it: three nodes of `ray.cluster_utils.Cluster` with a broker and a
Kafka listener each (`node.id` 0 on the head, 1 and 2 on the workers); Kafka is `benchmarks.kafka_cluster`'s three
combined broker-controllers. A fourth broker joins each side for the spread (a new Ray node with a broker and a
listener of `node.id` 3; a Kafka broker alone, `node.id` 4). In every scenario a producer (acks=all, idempotent)
writes to the topic throughout, and at its end no delivery failed and every acknowledged record reads back once.

- Decommission, with Kafka 3.9's tool: `--generate` over the brokers but the highest id (a worker on raybroker),
  `--execute` of the plan it proposed, `--verify` until every move completed; then no replica is on that broker.
- A throttled move listed and cancelled, then a spread onto a fourth broker, with Kafka 4.2's tool: a topic filled
  with `FILL_BYTES` per partition has each partition's second replica moved to the third broker under `--throttle`;
  `--list` shows every move in progress, `--cancel` ends them, the original replicas are what the metadata names
  and no throttle config is left. A move that only reverses each partition's replicas keeps its leader, and
  kafka-leader-election.sh's preferred election then makes the new first replica lead. Then the fourth broker
  joins, `--generate` over all four and `--execute`, `--verify` until done: every partition keeps its replication
  factor and the new broker holds replicas.

Kafka's tool, clients and broker are the oracle of what each step answers: both sides must end the same way, and
what the tools print is compared with each side's broker ids written by their rank (`B0` the lowest).

This module needs its own Ray cluster (`OWNS_RAY`: it runs after the tests sharing the session's Ray)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_replication_kafka import kafka_leaders, start_listeners
from benchmarks.kafka_broker import KAFKA_VERSION, KafkaUnavailable
from benchmarks.kafka_cluster import KafkaCluster
from tests.actors.three_nodes import Nodes, three_nodes
from tests.cluster.protocol.kafka_tools import LEADER_ELECTION, REASSIGN_PARTITIONS, printed_lines, run_kafka_tool
from tests.conftest import skip_or_fail

OWNS_RAY = True
pytestmark = [pytest.mark.ray, pytest.mark.kafka, pytest.mark.timeout(900)]

PARTITIONS = 3
REPLICATION_FACTOR = 2
# The producer writes one record every `SEND_INTERVAL_S`, from before a move until after it completed.
SEND_INTERVAL_S = 0.005
MOVE_TIMEOUT_S = 180.0
READ_TIMEOUT_S = 60.0
# The throttled move: each partition holds `FILL_BYTES` before it, and the copy is throttled to `THROTTLE_BYTES_S`
# per broker, so it lasts minutes on both sides (Kafka's throttle lets about one fetch through per 11 s window of
# its rate): `--list` and `--cancel` a few seconds later find it in progress.
FILL_BYTES = 4 * 1024 * 1024
FILL_RECORD_BYTES = 100 * 1024
THROTTLE_BYTES_S = 20_000
KAFKA_4_TOOLS = "4.2.2"
ELECTED = ", ".join(f"spread-{p}" for p in range(PARTITIONS))
# One partition of each coordinator topic, on both sides (Kafka's 50 would open 150 replicas for groups and
# transactions this module never uses).
BROKER_SETTINGS = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}


@dataclass
class Side:
    """One side of the comparison: its bootstrap servers, and how a fourth broker joins it (answering the bootstrap
    servers with that broker)."""

    bootstrap: str
    add_broker: Callable[[], str]


def add_ray_broker(nodes: Nodes, root: Path) -> str:
    """A new Ray node with a broker and a Kafka listener of `node.id` 3 on it; that listener's bootstrap server."""
    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    node = nodes.add([root / "node3-dir0"])
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": "3"})
    return str(start_kafka_listeners(config, node).bootstrap_servers)


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    """raybroker's three nodes with a listener each and Kafka's three brokers."""
    root = tmp_path_factory.mktemp("reassign-tools")
    with three_nodes(root, BROKER_SETTINGS) as nodes:
        ray_bootstrap = start_listeners(nodes)
        try:
            with KafkaCluster() as kafka:
                yield {
                    "raybroker": Side(ray_bootstrap, lambda: f"{ray_bootstrap},{add_ray_broker(nodes, root)}"),
                    "kafka": Side(kafka.bootstrap_servers, kafka.add_broker),
                }
        except KafkaUnavailable as exc:
            skip_or_fail(f"Apache Kafka is not available here: {exc}")


def admin(bootstrap: str) -> Any:
    """An AdminClient of `bootstrap`: keep it while its futures are pending (it cancels them when collected)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


class RunningProducer:
    """A librdkafka producer (acks=all, idempotent) writing numbered values round-robin over a topic's partitions
    on a thread of its own until `stop`; what it had acknowledged and what failed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "log_level": 0}
        )
        self._topic = topic
        self.acknowledged: list[bytes] = []
        self.failures: list[str] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reassign-producer", daemon=True)
        self._thread.start()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failures.append(str(error))
        else:
            self.acknowledged.append(message.value())

    def _run(self) -> None:
        index = 0
        while not self._stopping.is_set():
            self._producer.produce(
                self._topic, value=f"v{index}".encode(), partition=index % PARTITIONS, on_delivery=self._delivered
            )
            self._producer.poll(0)
            index += 1
            time.sleep(SEND_INTERVAL_S)

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(self.acknowledged) < count:
            assert time.monotonic() < deadline, f"only {len(self.acknowledged)} records acknowledged"
            time.sleep(0.05)

    def stop(self) -> int:
        """Stops writing and flushes; the count of records still unanswered."""
        self._stopping.set()
        self._thread.join(timeout=30)
        return int(self._producer.flush(60))


def broker_ids(bootstrap: str) -> list[int]:
    return sorted(admin(bootstrap).list_topics(timeout=30).brokers)


def led_by(bootstrap: str, topic: str, expected: list[int]) -> bool:
    """Whether the metadata names the `expected` leaders within `READ_TIMEOUT_S` (a broker's metadata follows an
    election with a lag)."""
    deadline = time.monotonic() + READ_TIMEOUT_S
    while kafka_leaders(bootstrap, topic) != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def replicas(bootstrap: str, topic: str) -> dict[int, list[int]]:
    """Each partition's replicas as the metadata names them, in order."""
    found = admin(bootstrap).list_topics(topic, timeout=30).topics[topic]
    return {number: list(partition.replicas) for number, partition in sorted(found.partitions.items())}


def create_topic(bootstrap: str, topic: str, assignment: list[list[int]] | None = None) -> None:
    """The topic, of `PARTITIONS` partitions with `REPLICATION_FACTOR` replicas (placed by `assignment` if given),
    once the metadata names every replica."""
    from confluent_kafka.admin import NewTopic

    new = (
        NewTopic(topic, PARTITIONS, REPLICATION_FACTOR)
        if assignment is None
        else NewTopic(topic, len(assignment), replica_assignment=assignment)
    )
    client = admin(bootstrap)
    client.create_topics([new])[topic].result(timeout=60)
    deadline = time.monotonic() + READ_TIMEOUT_S
    while sorted(len(held) for held in replicas(bootstrap, topic).values()) != [REPLICATION_FACTOR] * PARTITIONS:
        assert time.monotonic() < deadline, "the topic's metadata never named every replica"
        time.sleep(0.2)


def fill(bootstrap: str, topic: str) -> None:
    """`FILL_BYTES` in each partition, in records whose values start with `fill`."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    value = b"fill" + bytes(FILL_RECORD_BYTES - 4)
    for partition in range(PARTITIONS):
        for _ in range(FILL_BYTES // FILL_RECORD_BYTES):
            producer.produce(topic, value=value, partition=partition)
            producer.poll(0)
    assert producer.flush(60) == 0, "the fill was not acknowledged"


def read_back(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """Every record of the topic from its start but the fill, once `count` were read or the deadline passed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, partition, 0) for partition in range(PARTITIONS)])
        read: list[bytes] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(read) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                value = message.value() or b""
                if not value.startswith(b"fill"):
                    read.append(value)
        return read
    finally:
        consumer.close()


def producer_outcome(bootstrap: str, topic: str, producer: RunningProducer) -> dict[str, Any]:
    """Stops the producer after 100 more acknowledged records; what it lost, repeated or failed."""
    producer.wait_for(len(producer.acknowledged) + 100)
    unanswered = producer.stop()
    read = read_back(bootstrap, topic, len(producer.acknowledged))
    return {
        "failures": producer.failures[:3],
        "unanswered": unanswered,
        "lost": sorted(set(producer.acknowledged) - set(read))[:5],
        "duplicated": sorted(value for value in set(read) if read.count(value) > 1)[:5],
        "unacknowledged read": sorted(set(read) - set(producer.acknowledged))[:5],
        "acknowledged": len(producer.acknowledged) > 200,
    }


def completed(topic: str) -> list[str]:
    """What `--verify` says of every partition of a completed move."""
    return [f"Reassignment of partition {topic}-{p} is completed." for p in range(PARTITIONS)]


PRODUCED_WELL = {
    "failures": [],
    "unanswered": 0,
    "lost": [],
    "duplicated": [],
    "unacknowledged read": [],
    "acknowledged": True,
}


def tool(bootstrap: str, *arguments: str, version: str = KAFKA_VERSION) -> list[str]:
    """Kafka `version`'s reassignment tool run to a zero exit; the lines it printed."""
    ran = run_kafka_tool(REASSIGN_PARTITIONS, bootstrap, *arguments, version=version)
    assert ran.returncode == 0, (arguments, ran.stdout[-2000:], ran.stderr[-2000:])
    return printed_lines(ran)


def write_plan(path: Path, topic: str, assignment: dict[int, list[int]]) -> Path:
    partitions = [{"topic": topic, "partition": p, "replicas": held} for p, held in sorted(assignment.items())]
    path.write_text(json.dumps({"version": 1, "partitions": partitions}))
    return path


def generated_plan(bootstrap: str, topic: str, brokers: list[int], workdir: Path, version: str) -> Path:
    """The plan `--generate` proposes for the topic over `brokers`, written to a file."""
    topics_file = workdir / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    lines = tool(
        bootstrap,
        "--generate",
        "--topics-to-move-json-file",
        str(topics_file),
        "--broker-list",
        ",".join(str(broker) for broker in brokers),
        version=version,
    )
    plan_file = workdir / "plan.json"
    plan_file.write_text(lines[lines.index("Proposed partition reassignment configuration") + 1])
    return plan_file


# How `--verify` begins what it says of one partition.
PARTITION_STATUS = ("Reassignment of partition ", "There is no active reassignment of partition ")


def verify_until_done(bootstrap: str, plan_file: Path, version: str = KAFKA_VERSION) -> list[str]:
    """`--verify` until it says every partition's move completed, or `MOVE_TIMEOUT_S` passed; what it last said
    of each partition, in partition order. Rerun while a move is in progress, and also while it says a partition
    has no move in progress but other replicas than the plan's: the tool reads the replicas from a broker's
    metadata, which follows the controller with a lag."""
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    while True:
        lines = tool(bootstrap, "--verify", "--reassignment-json-file", str(plan_file), version=version)
        said = sorted(line for line in lines if line.startswith(PARTITION_STATUS))
        if all(line.endswith("is completed.") for line in said) or time.monotonic() > deadline:
            return said
        time.sleep(1)


def decommission(bootstrap: str, workdir: Path) -> dict[str, Any]:
    """The decommission of the module docstring on one side; what its checks look at."""
    topic = "decommissioned"
    create_topic(bootstrap, topic)
    ids = broker_ids(bootstrap)
    victim = ids[-1]
    producer = RunningProducer(bootstrap, topic)
    producer.wait_for(100)
    plan_file = generated_plan(bootstrap, topic, ids[:-1], workdir, KAFKA_VERSION)
    tool(bootstrap, "--execute", "--reassignment-json-file", str(plan_file))
    verified = verify_until_done(bootstrap, plan_file)
    return {
        "victim holds": [p for p, held in replicas(bootstrap, topic).items() if victim in held],
        "completed": verified,
        **producer_outcome(bootstrap, topic, producer),
    }


def each_side(
    sides: dict[str, Side], root: Path, scenario: Callable[[Side, Path], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """`scenario` on each side in turn, with a work folder of its own under `root`; each side's outcome. In turn,
    not at once: run at once on two cores, raybroker's throttled move twice finished on two of its three partitions
    before `--cancel` came, and a CreateTopics once failed with librdkafka's _DESTROY_BROKER; neither is explained
    yet, and the sides in turn passed 3 runs in a row."""
    outcomes = {}
    for name, side in sides.items():
        (root / name).mkdir()
        outcomes[name] = scenario(side, root / name)
    return outcomes


def test_kafka_reassign_partitions_decommissions_a_broker_under_a_producer_as_on_kafka(
    sides: dict[str, Side], tmp_path: Path
) -> None:
    outcomes = each_side(sides, tmp_path, lambda side, workdir: decommission(side.bootstrap, workdir))
    expected = {"victim holds": [], "completed": completed("decommissioned"), **PRODUCED_WELL}
    assert outcomes["kafka"] == expected, outcomes
    assert outcomes["raybroker"] == expected, outcomes


def by_rank(lines: list[str], ids: list[int]) -> list[str]:
    """The lines with each broker id written by its rank among `ids` (`B0` the lowest), where a line names
    brokers: after `replicas:`, `adding:`, `removing:`, in a replica list or after `broker`/`brokers`."""
    rank = {str(broker): f"B{index}" for index, broker in enumerate(ids)}

    def ranked(match: re.Match[str]) -> str:
        return re.sub(r"\d+", lambda number: rank.get(number.group(), number.group()), match.group())

    pattern = r"(replicas: |adding: |removing: |brokers? |\"replicas\":\[)[\d, ]*\d"
    return [re.sub(pattern, ranked, line) for line in lines]


def throttle_configs(bootstrap: str, topic: str, ids: list[int]) -> dict[str, str]:
    """The throttle configs set on the topic and on each broker (`<resource> <name>` -> value)."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    resources = [ConfigResource(ResourceType.TOPIC, topic)] + [
        ConfigResource(ResourceType.BROKER, str(broker)) for broker in ids
    ]
    dynamic = {ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DYNAMIC_BROKER_CONFIG.value}
    found = {}
    client = admin(bootstrap)
    for resource in resources:  # librdkafka asks one BROKER resource per call
        for name, entry in client.describe_configs([resource])[resource].result(timeout=30).items():
            if "throttled" in name and entry.source in dynamic:
                found[f"{resource.name} {name}"] = entry.value
    return found


def elect_preferred(bootstrap: str, topic: str, workdir: Path) -> list[str]:
    """kafka-leader-election.sh's preferred election of the topic's partitions run to a zero exit; the lines it
    printed, each list of partitions in order."""
    partitions = workdir / "elected.json"
    partitions.write_text(json.dumps({"partitions": [{"topic": topic, "partition": p} for p in range(PARTITIONS)]}))
    ran = run_kafka_tool(
        LEADER_ELECTION,
        bootstrap,
        "--election-type",
        "PREFERRED",
        "--path-to-json-file",
        str(partitions),
        version=KAFKA_4_TOOLS,
    )
    assert ran.returncode == 0, (ran.stdout[-2000:], ran.stderr[-2000:])
    lines = []
    for line in printed_lines(ran):
        head, _, named = line.partition(" for partitions ")
        lines.append(f"{head} for partitions {', '.join(sorted(named.split(', ')))}" if named else line)
    return lines


def cancel_then_spread(side: Side, workdir: Path) -> dict[str, Any]:
    """The throttled move listed and cancelled, then the spread onto a fourth broker, of the module docstring, on
    one side; what its checks look at."""
    topic = "spread"
    ids = broker_ids(side.bootstrap)
    original = {p: [ids[p], ids[(p + 1) % 3]] for p in range(PARTITIONS)}
    create_topic(side.bootstrap, topic, [original[p] for p in range(PARTITIONS)])
    fill(side.bootstrap, topic)
    producer = RunningProducer(side.bootstrap, topic)
    producer.wait_for(100)
    moved = {p: [ids[p], ids[(p + 2) % 3]] for p in range(PARTITIONS)}
    plan_file = write_plan(workdir / "throttled.json", topic, moved)
    tool(
        side.bootstrap,
        "--execute",
        "--reassignment-json-file",
        str(plan_file),
        "--throttle",
        str(THROTTLE_BYTES_S),
        version=KAFKA_4_TOOLS,
    )
    listed = tool(side.bootstrap, "--list", version=KAFKA_4_TOOLS)
    cancelled = tool(side.bootstrap, "--cancel", "--reassignment-json-file", str(plan_file), version=KAFKA_4_TOOLS)
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    while (after_cancel := replicas(side.bootstrap, topic)) != original:
        assert time.monotonic() < deadline, after_cancel
        time.sleep(0.5)
    listed_after = tool(side.bootstrap, "--list", version=KAFKA_4_TOOLS)
    throttles_left = throttle_configs(side.bootstrap, topic, ids)

    reversed_file = write_plan(workdir / "reversed.json", topic, {p: held[::-1] for p, held in original.items()})
    tool(side.bootstrap, "--execute", "--reassignment-json-file", str(reversed_file), version=KAFKA_4_TOOLS)
    verify_until_done(side.bootstrap, reversed_file, KAFKA_4_TOOLS)
    leaders_kept = kafka_leaders(side.bootstrap, topic) == [original[p][0] for p in range(PARTITIONS)]
    elected = elect_preferred(side.bootstrap, topic, workdir)
    leaders_preferred = led_by(side.bootstrap, topic, [original[p][1] for p in range(PARTITIONS)])

    all_ids = broker_ids(side.add_broker())
    new_broker = all_ids[-1]
    spread_file = generated_plan(side.bootstrap, topic, all_ids, workdir, KAFKA_4_TOOLS)
    tool(side.bootstrap, "--execute", "--reassignment-json-file", str(spread_file), version=KAFKA_4_TOOLS)
    verified = verify_until_done(side.bootstrap, spread_file, KAFKA_4_TOOLS)
    planned = {entry["partition"]: entry["replicas"] for entry in json.loads(spread_file.read_text())["partitions"]}
    spread = replicas(side.bootstrap, topic)
    return {
        "listed": by_rank(listed, ids),
        "cancelled": by_rank(cancelled, ids),
        "listed after cancel": listed_after,
        "throttles left": throttles_left,
        "leaders kept by the reversal": leaders_kept,
        "elected": elected,
        "leaders preferred after the election": leaders_preferred,
        "spread as planned": spread == planned,
        "replication factors": sorted(len(held) for held in spread.values()),
        "new broker holds a replica": any(new_broker in held for held in spread.values()),
        "completed": verified,
        **producer_outcome(side.bootstrap, topic, producer),
    }


def test_kafka_reassign_partitions_lists_and_cancels_a_throttled_move_then_spreads_onto_a_new_broker_as_on_kafka(
    sides: dict[str, Side], tmp_path: Path
) -> None:
    outcomes = each_side(sides, tmp_path, cancel_then_spread)
    oracle = outcomes["kafka"]
    assert oracle["listed"][0] == "Current partition reassignments:" and len(oracle["listed"]) == 1 + PARTITIONS, oracle
    assert oracle["listed after cancel"] == ["No partition reassignments found."], oracle
    expected = {
        "throttles left": {},
        "leaders kept by the reversal": True,
        "elected": [f"Successfully completed leader election (PREFERRED) for partitions {ELECTED}"],
        "leaders preferred after the election": True,
        "spread as planned": True,
        "replication factors": [REPLICATION_FACTOR] * PARTITIONS,
        "new broker holds a replica": True,
        "completed": completed("spread"),
        **PRODUCED_WELL,
    }
    assert {key: oracle[key] for key in expected} == expected, outcomes
    assert outcomes["raybroker"] == oracle, outcomes
