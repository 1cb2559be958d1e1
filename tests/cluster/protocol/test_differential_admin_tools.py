"""Apache Kafka's own admin tools against Apache Kafka 3.9.1 and against raybroker's listener, their answers compared
(exit code, printed lines) and what they left behind.

- kafka-consumer-groups.sh `--delete-offsets` (OffsetDelete): an Empty group (its consumer only committed) loses one
  partition's offset; a group with a member subscribed to one topic keeps that topic's offsets
  (GROUP_SUBSCRIBED_TO_TOPIC) and loses the other's; a group never seen and a topic that does not exist are refused.
- kafka-log-dirs.sh `--describe` (DescribeLogDirs): the replicas of a written topic, each with offset lag 0, not a
  future replica, and its size equal to the bytes of its segment files on that broker's disk; a topic that does not
  exist lists nothing.
- kafka-topics.sh `--describe` (DescribeTopicPartitions, which Kafka 3.7+'s Admin client prefers to Metadata) of
  two topics in pages of 2 partitions (`--partition-size-limit-per-response`): the same lines, broker ids and topic
  ids aside.
- kafka-reassign-partitions.sh (AlterPartitionReassignments, ListPartitionReassignments) on one broker: a plan
  generated, a partition reassigned onto its own broker with a throttle (complete at once), verified (which clears
  the throttles), listed, cancelled with none in progress, and a plan naming a broker that does not exist. With
  kafka-configs.sh: the throttles `--throttle` sets and `--verify` clears, described alike, and the every-broker
  level and bad throttle values answered alike. `raybroker reassign` runs the same steps against
  raybroker and prints what Kafka's tool prints against Apache Kafka (its error on the CLI's one error line).
  Moves between brokers run in `handlers/test_reassignments.py` (two in-process nodes) and
  `tests/actors/test_zz_replication.py`, and this tool on three Ray nodes under a producer, beside a three-broker
  Kafka, in `tests/actors/test_zz_reassign_tools.py` (a broker decommissioned; a throttled move listed and
  cancelled; a spread onto a fourth broker); KIP-860's refusals, with Kafka 4.2's tool, in
  `test_kafka4_reassignments.py`.
- kafka-configs.sh `--alter`/`--describe` of client quotas (AlterClientQuotas, DescribeClientQuotas) through the
  listener on Ray, whose quotas live in the controller actor, and the quota enforced there: a client id of 64 KiB/s
  writing 12 times that sees throttle events on both brokers (Kafka's windows let ten times through at once). The
  quota semantics are compared with Kafka 4.2 in `test_client_quotas.py`.
- kafka-features.sh (ApiVersions' features, UpdateFeatures) through the listener on Ray, whose features live in the
  controller actor: `describe` agrees on `metadata.version` (3.9-IV0, the level Kafka 3.9.1 finalizes; Kafka also
  lists `kraft.version`, which raybroker has not, and raybroker `transaction.version` 0-2, `group.version` 0-1 and
  `share.version` 0-1, finalized at 2, 1 and 1 as on Kafka 4.2, which Kafka 3.9 does not list), an unknown feature is
  refused alike (raybroker's message begins with Kafka 4's "The update failed for all features ..."), and a downgrade
  of `transaction.version` to 0 is answered alike and moves raybroker's epoch at once (raybroker's is set back to 2, a
  new cluster's level, afterwards). Kafka 4.2, which supports `transaction.version` 2 as raybroker does where Kafka 3.9
  does not, is the oracle of the features' other rules in `test_features.py`.
- kafka-leader-election.sh (ElectLeaders) on one broker: preferred and unclean elections that are not needed, an
  election of every partition, an unknown topic and an unknown partition. Elections that move a leader need
  several brokers; `tests/cluster/protocol/handlers/test_elect_leaders.py` runs them on a two-node broker.

Each run of a tool starts a JVM (~2 s).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.protocol.listener import KafkaListener
from tests.cluster.cli.cli_support import run as run_cli
from tests.cluster.protocol.helpers import assigned_member
from tests.cluster.protocol.kafka_tools import (
    CONFIGS,
    CONSUMER_GROUPS,
    FEATURES,
    LEADER_ELECTION,
    LOG_DIRS,
    REASSIGN_PARTITIONS,
    TOPICS,
    printed_lines,
    run_kafka_tool,
)
from tests.cluster.protocol.test_client_quotas import RECORD_BYTES, on_both, produce_throttled

pytestmark = [pytest.mark.ray, pytest.mark.kafka]

DEADLINE_S = 30.0
QUIET = {"log_level": 0}
SUBSCRIBED, OTHER = "od-subscribed", "od-other"


@pytest.fixture(scope="module")
def raybroker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[str]:
    start_test_broker(num_partitions="2")
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": "2"}) as started:
        yield started.bootstrap_servers


def tool(bootstrap: str, *arguments: str) -> tuple[int, list[list[str]], list[str]]:
    """kafka-consumer-groups.sh against `bootstrap`: its exit code, the rows it printed, and its `Error:` lines."""
    ran = run_kafka_tool(CONSUMER_GROUPS, bootstrap, *arguments)
    rows = [line.split() for line in ran.stdout.splitlines() if line.strip() and not line.startswith("Error")]
    errors = [line for line in (ran.stdout + ran.stderr).splitlines() if line.startswith("Error")]
    return ran.returncode, rows, errors


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int], consumer: Any = None) -> None:
    """Commits `offsets` under `group`: through `consumer` (a member) if given, else as a consumer outside the
    group's membership (generation -1)."""
    from confluent_kafka import Consumer, TopicPartition

    committer = consumer or Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **QUIET}
    )
    try:
        committer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        if consumer is None:
            committer.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(timeout=DEADLINE_S).topic_partitions}


def offset_delete_answers(bootstrap: str) -> dict[str, Any]:
    """The scenario of the module docstring on one broker: each run's answer, then each group's offsets left."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(SUBSCRIBED, 2, 1), NewTopic(OTHER, 1, 1)]).values():
        future.result(timeout=DEADLINE_S)
    everything = {(SUBSCRIBED, 0): 3, (SUBSCRIBED, 1): 4, (OTHER, 0): 5}
    commit(bootstrap, "od-empty", everything)
    answers: dict[str, Any] = {
        "empty": tool(bootstrap, "--delete-offsets", "--group", "od-empty", "--topic", f"{SUBSCRIBED}:0"),
        "unknown group": tool(bootstrap, "--delete-offsets", "--group", "od-never-seen", "--topic", SUBSCRIBED),
        "unknown topic": tool(bootstrap, "--delete-offsets", "--group", "od-empty", "--topic", "od-missing"),
    }
    member = assigned_member(bootstrap, "od-active", SUBSCRIBED, DEADLINE_S)
    try:
        commit(bootstrap, "od-active", everything, member)
        answers["active"] = tool(
            bootstrap, "--delete-offsets", "--group", "od-active", "--topic", SUBSCRIBED, "--topic", OTHER
        )
    finally:
        member.close()
    answers["left"] = {group: committed(bootstrap, group) for group in ("od-empty", "od-active")}
    return answers


def test_kafka_consumer_groups_delete_offsets_agrees(kafka: str, raybroker: str) -> None:
    answers = {
        name: offset_delete_answers(bootstrap) for name, bootstrap in {"kafka": kafka, "raybroker": raybroker}.items()
    }
    oracle = answers["kafka"]
    assert oracle["empty"][0] == 0 and oracle["left"]["od-empty"] == {(SUBSCRIBED, 1): 4, (OTHER, 0): 5}
    assert oracle["left"]["od-active"] == {(SUBSCRIBED, 0): 3, (SUBSCRIBED, 1): 4}
    assert oracle["unknown group"][2] == ["Error: 'od-never-seen' does not exist."], oracle["unknown group"]
    for case in ("empty", "unknown group", "unknown topic", "active", "left"):
        assert answers["raybroker"][case] == oracle[case], (case, answers["raybroker"][case], oracle[case])


def leader_election_answers(bootstrap: str) -> dict[str, tuple[int, list[str]]]:
    """kafka-leader-election.sh's exit code and printed lines (stack traces aside) for each case of the module
    docstring, on a new two-partition topic."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic("elected", 2, 1)])["elected"].result(timeout=DEADLINE_S)
    cases = {
        "preferred": ["--election-type", "preferred", "--topic", "elected", "--partition", "0"],
        "unclean": ["--election-type", "unclean", "--topic", "elected", "--partition", "1"],
        "every partition": ["--election-type", "preferred", "--all-topic-partitions"],
        "unknown topic": ["--election-type", "preferred", "--topic", "never-made", "--partition", "0"],
        "unknown partition": ["--election-type", "preferred", "--topic", "elected", "--partition", "9"],
    }
    answers = {}
    for case, arguments in cases.items():
        ran = run_kafka_tool(LEADER_ELECTION, bootstrap, *arguments)
        said = [line for line in ran.stdout.splitlines() if line.strip()]
        answers[case] = (ran.returncode, said)
    return answers


def test_kafka_leader_election_agrees(kafka: str, raybroker: str) -> None:
    answers = {
        name: leader_election_answers(bootstrap) for name, bootstrap in {"kafka": kafka, "raybroker": raybroker}.items()
    }
    oracle = answers["kafka"]
    assert oracle["preferred"] == (0, ["Valid replica already elected for partitions elected-0"])
    assert oracle["unknown topic"][0] != 0
    for case, answer in oracle.items():
        assert answers["raybroker"][case] == answer, (case, answers["raybroker"][case], answer)


def log_dirs_answers(bootstrap: str) -> dict[str, Any]:
    """kafka-log-dirs.sh on a new topic of two partitions holding 3 and 5 records: each replica's entry (sizes set
    aside, checked against the segment files), and what a topic that does not exist lists."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic("dirs", 2, 1)])["dirs"].result(timeout=DEADLINE_S)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET})
    for partition, count in ((0, 3), (1, 5)):
        for index in range(count):
            producer.produce("dirs", value=f"record-{index}".encode(), partition=partition)
            producer.flush(DEADLINE_S)

    def describe(topics: str) -> list[dict[str, Any]]:
        ran = run_kafka_tool(LOG_DIRS, bootstrap, "--describe", "--topic-list", topics)
        assert ran.returncode == 0, ran.stderr[-2000:]
        (answer,) = [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]
        return [
            {**entry, "logDir": log_dir["logDir"], "error": log_dir["error"]}
            for broker in answer["brokers"]
            for log_dir in broker["logDirs"]
            for entry in log_dir["partitions"]
        ]

    replicas = describe("dirs")
    for replica in replicas:
        segments = (Path(replica["logDir"]) / replica["partition"]).glob("*.log")
        assert replica["size"] == sum(segment.stat().st_size for segment in segments) > 0, replica
    return {
        "dirs": sorted(
            (replica["partition"], replica["offsetLag"], replica["isFuture"], replica["error"]) for replica in replicas
        ),
        "missing": describe("never-made"),
    }


def test_kafka_log_dirs_agrees(kafka: str, raybroker: str) -> None:
    answers = {
        name: log_dirs_answers(bootstrap) for name, bootstrap in {"kafka": kafka, "raybroker": raybroker}.items()
    }
    oracle = answers["kafka"]
    assert oracle == {"dirs": [("dirs-0", 0, False, None), ("dirs-1", 0, False, None)], "missing": []}
    assert answers["raybroker"] == oracle


def topics_described(bootstrap: str) -> list[str]:
    """kafka-topics.sh --describe of two new topics (3 and 2 partitions) in pages of 2 partitions: its lines, each
    topic id and broker id replaced by a placeholder (the clusters differ in those), configs left out."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic("paged-a", 3, 1), NewTopic("paged-b", 2, 1)]).values():
        future.result(timeout=DEADLINE_S)
    ran = run_kafka_tool(
        TOPICS, bootstrap, "--describe", "--topic", "paged-.*", "--partition-size-limit-per-response", "2"
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = []
    for line in ran.stdout.splitlines():
        fields = [field for field in line.strip().split("\t") if not field.startswith("Configs:")]
        for index, field in enumerate(fields):
            name, _, value = field.partition(": ")
            if name == "TopicId":
                fields[index] = "TopicId: <id>"
            elif name in ("Leader", "Replicas", "Isr") and value.lstrip("-").isdigit():
                fields[index] = f"{name}: <broker>"
        lines.append("\t".join(fields))
    return lines


def test_kafka_topics_describe_pages_agree(kafka: str, raybroker: str) -> None:
    answers = {
        name: topics_described(bootstrap) for name, bootstrap in {"kafka": kafka, "raybroker": raybroker}.items()
    }
    oracle = answers["kafka"]
    assert sum(line.startswith("Topic: paged-a\tPartition:") for line in oracle) == 3, oracle
    assert answers["raybroker"] == oracle


# The steps on a new topic of one partition: each step's arguments, and whether it reads a plan naming the broker B
# (a list: its replicas, B+100 standing for a broker that does not exist).
REASSIGN_STEPS: dict[str, tuple[tuple[str, ...], list[str] | None]] = {
    "generate": (("--generate",), None),
    "execute": (("--execute", "--throttle", "1000000"), ["B"]),
    "verify": (("--verify",), ["B"]),
    "list": (("--list",), None),
    "cancel": (("--cancel",), ["B"]),
    "unknown broker": (("--execute",), ["B", "B+100"]),
}


def reassign_answers(
    bootstrap: str, topic: str, folder: Path, tool: Callable[[list[str]], tuple[int, str]]
) -> dict[str, tuple[int, list[str]]]:
    """`REASSIGN_STEPS` on a new `topic` through `tool` (arguments -> exit code, printed text) against the cluster
    at `bootstrap`: each step's exit code and printed lines, the broker's id written B (each broker has its own)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=DEADLINE_S)
    (broker,) = admin.list_topics(timeout=DEADLINE_S).brokers
    ids = {"B": broker, "B+100": broker + 100}
    folder.mkdir(parents=True, exist_ok=True)
    topics = folder / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}), encoding="utf-8")

    def step(arguments: tuple[str, ...], replicas: list[str] | None) -> tuple[int, list[str]]:
        extra: list[str] = []
        if replicas is not None:
            plan = folder / "plan.json"
            partitions = [{"topic": topic, "partition": 0, "replicas": [ids[r] for r in replicas]}]
            plan.write_text(json.dumps({"version": 1, "partitions": partitions}), encoding="utf-8")
            extra = ["--reassignment-json-file", str(plan)]
        if arguments == ("--generate",):
            extra = ["--topics-to-move-json-file", str(topics), "--broker-list", str(broker)]
        code, text = tool([*arguments, *extra])
        lines = [
            line.replace(f"[{broker}]", "[B]")
            .replace(f"[{broker},{broker + 100}]", "[B,B+100]")
            .replace(f"broker id {broker + 100}", "broker id B+100")
            .replace(f"throttles on broker {broker}", "throttles on broker B")
            for line in text.splitlines()
            if line.strip() and not line.startswith(("SLF4J", "log4j:", "\tat "))
        ]
        return code, lines

    return {name: step(arguments, replicas) for name, (arguments, replicas) in REASSIGN_STEPS.items()}


def kafka_reassign(bootstrap: str) -> Callable[[list[str]], tuple[int, str]]:
    def run(arguments: list[str]) -> tuple[int, str]:
        ran = run_kafka_tool(REASSIGN_PARTITIONS, bootstrap, *arguments)
        # --cancel ends its output without a newline.
        return ran.returncode, f"{ran.stdout}\n{ran.stderr}"

    return run


def test_kafka_reassign_partitions_agrees(kafka: str, raybroker: str, tmp_path: Path) -> None:
    answers = {
        name: reassign_answers(bootstrap, "moved", tmp_path / name, kafka_reassign(bootstrap))
        for name, bootstrap in {"kafka": kafka, "raybroker": raybroker}.items()
    }
    oracle = answers["kafka"]
    assert oracle["execute"][0] == 0 and oracle["list"][0] == 0 and oracle["unknown broker"][0] == 1, oracle
    for step, answer in oracle.items():
        assert answers["raybroker"][step] == answer, (step, answers["raybroker"][step], answer)


def test_raybroker_reassign_answers_as_kafka_reassign_partitions_on_kafka(
    kafka: str, raybroker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`raybroker reassign` (over Ray) against raybroker, and Kafka's own tool against Apache Kafka: the same lines
    at each step but the error's, which is the same message on the CLI's one error line."""

    def ours(arguments: list[str]) -> tuple[int, str]:
        code, out, err = run_cli(capsys, "reassign", *arguments)
        return code, out + err

    oracle = reassign_answers(kafka, "moved-cli", tmp_path / "kafka", kafka_reassign(kafka))
    answers = reassign_answers(raybroker, "moved-cli", tmp_path / "raybroker", ours)
    assert oracle["generate"][0] == 0 and oracle["verify"][0] == 0, oracle
    for step, answer in oracle.items():
        if step == "unknown broker":
            continue
        assert answers[step] == answer, (step, answers[step], answer)
    code, lines = answers["unknown broker"]
    assert (code, [line.removeprefix("raybroker: error: ") for line in lines]) == (
        oracle["unknown broker"][0],
        [oracle["unknown broker"][1][0].removeprefix("Error: ")],
    )


THROTTLE_B_S = 5_000_000


def throttle_answers(bootstrap: str, topic: str, folder: Path) -> dict[str, tuple[int, list[str]]]:
    """kafka-reassign-partitions.sh with `--throttle` on a new `topic` (onto its own broker, B), and kafka-configs.sh
    describing and setting the replication throttles it leaves: each step's exit code and printed lines."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=DEADLINE_S)
    (broker,) = admin.list_topics(timeout=DEADLINE_S).brokers
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / "plan.json"
    partitions = [{"topic": topic, "partition": 0, "replicas": [broker]}]
    plan.write_text(json.dumps({"version": 1, "partitions": partitions}), encoding="utf-8")
    of_broker = ("--entity-type", "brokers", "--entity-name", str(broker))
    of_topic = ("--entity-type", "topics", "--entity-name", topic)
    steps: dict[str, tuple[str, tuple[str, ...]]] = {
        "execute": (REASSIGN_PARTITIONS, ("--execute", "--throttle", str(THROTTLE_B_S))),
        "broker throttled": (CONFIGS, ("--describe", *of_broker)),
        "topic throttled": (CONFIGS, ("--describe", *of_topic)),
        "verify": (REASSIGN_PARTITIONS, ("--verify",)),
        "broker cleared": (CONFIGS, ("--describe", *of_broker)),
        "topic cleared": (CONFIGS, ("--describe", *of_topic)),
        "set default": (
            CONFIGS,
            (
                "--alter",
                "--entity-type",
                "brokers",
                "--entity-default",
                "--add-config",
                "leader.replication.throttled.rate=700",
            ),
        ),
        "describe default": (CONFIGS, ("--describe", "--entity-type", "brokers", "--entity-default")),
        "broker under default": (CONFIGS, ("--describe", *of_broker)),
        "bad rate": (CONFIGS, ("--alter", *of_broker, "--add-config", "follower.replication.throttled.rate=-5")),
        "bad replicas": (CONFIGS, ("--alter", *of_topic, "--add-config", "leader.replication.throttled.replicas=0-1")),
        "delete default": (
            CONFIGS,
            (
                "--alter",
                "--entity-type",
                "brokers",
                "--entity-default",
                "--delete-config",
                "leader.replication.throttled.rate",
            ),
        ),
    }
    answers = {}
    for name, (tool_class, arguments) in steps.items():
        extra = ("--reassignment-json-file", str(plan)) if tool_class == REASSIGN_PARTITIONS else ()
        ran = run_kafka_tool(tool_class, bootstrap, *arguments, *extra)
        answers[name] = (
            ran.returncode,
            [
                line.replace(bootstrap, "BOOTSTRAP")
                .replace(f"broker {broker}", "broker B")
                .replace(f"--entity-name {broker} ", "--entity-name B ")
                .replace(f"[{broker}]", "[B]")
                .replace(f"=0:{broker} ", "=0:B ")
                .replace(f"=0:{broker}}}", "=0:B}")
                for line in printed_lines(ran)
            ],
        )
    return answers


def test_kafka_reassign_partitions_throttles_agree(kafka: str, raybroker: str, tmp_path: Path) -> None:
    """A reassignment with `--throttle` sets the brokers' rates and the topic's throttled replicas as Kafka's, which
    kafka-configs.sh describes alike, and `--verify` clears them; the cluster-wide default level and bad values are
    answered alike."""
    oracle = throttle_answers(kafka, "throttled-move", tmp_path / "kafka")
    ours = throttle_answers(raybroker, "throttled-move", tmp_path / "raybroker")
    assert oracle["execute"][0] == 0 and any("throttle" in line for line in oracle["broker throttled"][1]), oracle
    assert {step: answer for step, answer in ours.items() if answer != oracle[step]} == {
        step: answer for step, answer in oracle.items() if answer != ours[step]
    }


QUOTA_BYTES_S = 64 * 1024


def quota_answers(bootstrap: str) -> dict[str, Any]:
    """A client id's quota set and described with kafka-configs.sh, then a producer of that id writing 12 times its
    quota a second (see the module docstring)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic("quota-slow", 1, 1)])["quota-slow"].result(timeout=DEADLINE_S)
    answers: dict[str, Any] = {}
    for step, arguments in {
        "alter": ["--alter", "--entity-type", "clients", "--entity-name", "ray-slow", "--add-config",
                  f"producer_byte_rate={QUOTA_BYTES_S}"],
        "describe": ["--describe", "--entity-type", "clients", "--entity-name", "ray-slow"],
    }.items():  # fmt: skip
        ran = run_kafka_tool(CONFIGS, bootstrap, *arguments)
        answers[step] = (ran.returncode, [line for line in ran.stdout.splitlines() if line.strip()])
    sent = 12 * QUOTA_BYTES_S // RECORD_BYTES * RECORD_BYTES
    answers["throttled"] = produce_throttled(bootstrap, "quota-slow", "ray-slow", sent)[1] > 0
    return answers


def test_kafka_configs_client_quotas_agree_and_throttle_on_ray(kafka: str, raybroker: str) -> None:
    oracle, ours = on_both(quota_answers, kafka, raybroker)
    assert oracle["describe"] == (
        0,
        [f"Quota configs for client-id 'ray-slow' are producer_byte_rate={QUOTA_BYTES_S}.0"],
    )
    assert oracle["throttled"], oracle
    assert ours == oracle


def features_answers(bootstrap: str) -> dict[str, tuple[int, list[str]]]:
    """kafka-features.sh's describe, a refused upgrade and a downgrade (see the module docstring): exit codes and
    printed lines, `Local controller <id>` written without its id and Kafka 4's prefix of a refusal removed."""
    answers = {}
    for step, arguments in {
        "describe": ["describe"],
        "refused": ["upgrade", "--feature", "nosuch.version=1"],
        "downgraded": ["downgrade", "--feature", "transaction.version=0"],
    }.items():
        ran = run_kafka_tool(FEATURES, bootstrap, *arguments)
        answers[step] = (
            ran.returncode,
            [
                re.sub(r"Local controller \d+", "Local controller", line).replace(
                    "The update failed for all features since the following feature had an error: ", ""
                )
                for line in printed_lines(ran)
            ],
        )
    return answers


def described(lines: list[str]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """describe's feature lines split into their fields, by feature, and any other line it printed."""
    features, other = {}, []
    for line in lines:
        if line.startswith("Feature: "):
            fields = dict(field.split(": ", 1) for field in line.split("\t"))
            features[fields["Feature"]] = fields
        else:
            other.append(line)
    return features, other


def test_kafka_features_agree_on_ray(kafka: str, raybroker: str) -> None:
    try:
        oracle, ours = on_both(features_answers, kafka, raybroker)
    finally:
        restored = run_kafka_tool(FEATURES, raybroker, "upgrade", "--feature", "transaction.version=2")
        assert printed_lines(restored) == ["transaction.version was upgraded to 2."], printed_lines(restored)
    assert ours["refused"] == oracle["refused"] and oracle["refused"][0] == 1, oracle
    assert ours["downgraded"] == oracle["downgraded"] == (0, ["transaction.version was downgraded to 0."])
    (features, other), (oracle_features, oracle_other) = (described(run["describe"][1]) for run in (ours, oracle))
    assert (ours["describe"][0], other) == (oracle["describe"][0], oracle_other) == (0, [])
    assert oracle_features.keys() == {"kraft.version", "metadata.version"}
    assert features.keys() == {"metadata.version", "transaction.version", "group.version", "share.version"}
    levels = ("SupportedMinVersion", "SupportedMaxVersion", "FinalizedVersionLevel")
    assert [features["transaction.version"][field] for field in levels] == ["0", "2", "2"]
    assert [features["group.version"][field] for field in levels] == ["0", "1", "1"]
    assert [features["share.version"][field] for field in levels] == ["0", "1", "1"]
    before, oracle_before = features["metadata.version"], oracle_features["metadata.version"]
    for field in ("SupportedMaxVersion", "FinalizedVersionLevel"):
        assert before[field] == oracle_before[field] == "3.9-IV0", (before, oracle_before)
    # Whichever listener the tool asks has the new epoch within its refresh interval (this one at once).
    deadline = time.monotonic() + DEADLINE_S
    while features_epoch(raybroker) <= int(before["Epoch"]):
        assert time.monotonic() < deadline, "the features' epoch did not move"
        time.sleep(0.5)


def features_epoch(bootstrap: str) -> int:
    """The features' epoch kafka-features.sh describes."""
    features, _ = described(printed_lines(run_kafka_tool(FEATURES, bootstrap, "describe")))
    return int(features["metadata.version"]["Epoch"])
