"""`raybroker share-groups` against Kafka 4.2.2's own `kafka-share-groups.sh` (`ShareGroupCommand`): usage errors
without Ray, then one sequence run twice, with Kafka's tool against Apache Kafka 4.2.2 and with `raybroker
share-groups` against raybroker on a real local Ray, printing the same tables once names, member ids, hosts and
coordinators are masked.

The sequence: a share group reads a two-partition topic from the earliest offset (its `share.auto.offset.reset`); a
librdkafka share consumer accepts the `a` records and rejects the `r` ones (six records, all settled). With the member
in the group: `--describe --members`, `--describe --state --verbose`, and a refused `--reset-offsets --execute`. After
it left and three more records came: `--list --state`, `--describe` (the offsets, lag 3 over both partitions), the
`--members` of an Empty group, resets to earliest (dry run), to a datetime before the records and to the latest
(executed, the lag 0 after), `--delete-offsets` (the topic, and one that does not exist), the offsets once deleted,
`--delete`, and a `--describe` of the deleted group (an error on both).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer
from confluent_kafka import ShareConsumer as LibrdkafkaShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from benchmarks.kafka_broker import KAFKA_4_VERSION
from cluster.cli.main import EXIT_OK, EXIT_USAGE
from cluster.protocol.client import WireClient
from cluster.protocol.listener import KafkaListener
from tests.cluster.cli.cli_support import one_error_line
from tests.cluster.cli.cli_support import run as run_cli
from tests.cluster.protocol.conftest import SHARE_GROUP_SETTINGS, kafka4  # noqa: F401 (the fixture)
from tests.cluster.protocol.kafka_tools import printed_lines, run_kafka_tool
from tests.cluster.protocol.test_group_configs import RESET, SET, alter

SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
DEADLINE_S = 60.0
ACCEPTED, REJECTED = 4, 2
# The lines of an error, which the tools word differently (`Error: ...` and Java's exceptions, `raybroker: error: ...`).
ERROR_LINES = ("Error:", "raybroker: error:", "Caused by:", "java.", "org.apache.kafka")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "share-groups", *argv)


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == EXIT_OK
    assert "--reset-offsets" in out and "--to-datetime" in out and "--members" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--describe"], "--describe needs --group or --all-groups"),
        (["--describe", "--group", "g", "--all-groups"], "--describe needs --group or --all-groups"),
        (["--delete"], "--delete needs --group or --all-groups"),
        (["--list", "--group", "g"], "--list takes no --group"),
        (["--reset-offsets", "--group", "g", "--to-latest"], "--topic or --all-topics"),
        (["--reset-offsets", "--group", "g", "--topic", "t"], "needs one of --to-earliest"),
        (["--reset-offsets", "--group", "g", "--group", "h", "--topic", "t", "--to-latest"], "exactly one --group"),
        (["--reset-offsets", "--group", "g", "--topic", "t", "--to-latest"], "needs --dry-run"),
        (["--describe", "--group", "g", "--execute"], "go with --reset-offsets"),
        (["--list", "--to-earliest"], "go with --reset-offsets"),
        (["--delete-offsets", "--group", "g"], "--delete-offsets needs --topic"),
        (["--list", "--members"], "go with --describe"),
        (["--delete", "--group", "g", "--state"], "--state goes with --describe or --list"),
        (["--describe", "--group", "g", "--state", "Empty"], "takes no value with --describe"),
    ],
)
def test_option_combinations_it_refuses_are_one_line_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert message in one_error_line(err)


def test_views_are_exclusive_and_an_action_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--group", "g"], ["--describe", "--group", "g", "--members", "--offsets"]):
        code, _, err = run(capsys, *argv)
        assert code == EXIT_USAGE and "Traceback" not in err


def settled_group(bootstrap: str) -> tuple[dict[str, str], LibrdkafkaShareConsumer, Producer]:
    """The module docstring's group: its topic made and six records settled by a member; the names used, the member
    (still in the group) and the producer."""
    topic, group = f"tasks-{uuid.uuid4().hex[:8]}", f"workers-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=60)
    with WireClient(bootstrap.split(",")[0]) as client:
        assert alter(client, group, [(RESET, SET, "earliest")], False) == (ErrorCode.none, None)
    producer = Producer({"bootstrap.servers": bootstrap})
    values = [f"a{i}" for i in range(ACCEPTED)] + [f"r{i}" for i in range(REJECTED)]
    for index, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=index % 2)
    assert producer.flush(30) == 0
    consumer = LibrdkafkaShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "cli-member",
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < len(values):
        assert time.monotonic() < deadline, f"only {seen} delivered"
        records = [record for record in consumer.poll(0.5) if record.error() is None]
        for record in records:
            value = record.value().decode()
            kind = AcknowledgeType.ACCEPT if value.startswith("a") else AcknowledgeType.REJECT
            consumer.acknowledge(record, kind)
            seen.append(value)
        if records:
            consumer.commit_sync()
    assert sorted(seen) == sorted(values)
    return {"topic": topic, "group": group}, consumer, producer


RUNS_WITH_MEMBER = (
    ("--describe", "--group", "{group}", "--members"),
    ("--describe", "--group", "{group}", "--state"),
    ("--reset-offsets", "--group", "{group}", "--topic", "{topic}", "--to-earliest", "--execute"),
)
RUNS_AFTER = (
    ("--list", "--state"),
    ("--describe", "--group", "{group}"),
    ("--describe", "--group", "{group}", "--members"),
    ("--describe", "--group", "{group}", "--state", "--verbose"),
    ("--reset-offsets", "--group", "{group}", "--topic", "{topic}", "--to-earliest", "--dry-run"),
    ("--reset-offsets", "--group", "{group}", "--topic", "{topic}:1", "--to-datetime", "2000-01-01T00:00:00.000"),
    (
        "--reset-offsets",
        "--group",
        "{group}",
        "--topic",
        "{topic}:1",
        "--to-datetime",
        "2000-01-01T00:00:00.000",
        "--dry-run",
    ),
    (
        "--reset-offsets",
        "--group",
        "{group}",
        "--topic",
        "{topic}",
        "--to-datetime",
        "2100-01-01T00:00:00.000",
        "--dry-run",
    ),
    ("--reset-offsets", "--group", "{group}", "--all-topics", "--to-latest", "--execute"),
    ("--describe", "--group", "{group}", "--offsets", "--verbose"),
    ("--delete-offsets", "--group", "{group}", "--topic", "{topic}", "--topic", "no-such-topic"),
    ("--describe", "--group", "{group}"),
    ("--delete", "--group", "{group}"),
    ("--describe", "--group", "{group}"),
)


def differential(bootstrap: str, tool: Callable[[list[str]], tuple[int, list[str]]]) -> list[tuple[str, Any]]:
    """The module docstring's runs of `tool` (exit code and printed lines) on one broker, each masked: an error's
    lines differ between the tools (`Error: ...` and `raybroker: error: ...`), so a failed run keeps its exit code."""
    names, consumer, producer = settled_group(bootstrap)
    masks = [(names["group"], "GROUP"), (names["topic"], "TOPIC")]

    def masked(line: str) -> str:
        for name, mask in masks:
            line = line.replace(name, mask)
        line = re.sub(r"\S+:\d+\s+\(\d+\)", "HOST (ID)", re.sub(r" +", " ", line.strip()))
        line = re.sub(r"^GROUP \S+ \S+ cli-member", "GROUP MEMBER HOST cli-member", line)
        # Kafka 4.2.2's coordinator bumps the group epoch once more than raybroker's (with the member: 2 and 2 where
        # raybroker has 1 and 1; after it left: 3 and 2, raybroker 2 and 1): the epochs are left out.
        return re.sub(r"^(GROUP HOST \(ID\) \w+) \d+ \d+ (\d+)$", r"\1 EPOCH EPOCH \2", line)

    def ran(runs: tuple[tuple[str, ...], ...]) -> list[tuple[str, Any]]:
        outputs = []
        for arguments in runs:
            argv = [argument.format(**names) for argument in arguments]
            code, lines = tool(argv)
            failed = code != 0 or any(line.startswith("Error:") or " Error: " in line for line in lines)
            shown = sorted(masked(line) for line in lines if not line.startswith(ERROR_LINES))
            if failed:
                # A failed run's own words differ; what both print is the `TOPIC STATUS` table of --delete-offsets.
                shown = [line for line in shown if line.endswith(("STATUS", "Successful")) or " Error: " in line]
            outputs.append((" ".join(arguments), failed, shown))
        return outputs

    try:
        with_member = ran(RUNS_WITH_MEMBER)
    finally:
        consumer.close()
    for index in range(3):
        producer.produce(names["topic"], value=f"late{index}".encode(), partition=index % 2)
    assert producer.flush(30) == 0
    return with_member + ran(RUNS_AFTER)


@pytest.fixture(scope="module")
def ray_listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    settings = {key.replace(".", "_"): v for key, v in SHARE_GROUP_SETTINGS.items() if key.startswith("group.share.")}
    start_test_broker(**settings)
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started


@pytest.mark.ray
@pytest.mark.kafka
def test_share_groups_prints_the_tables_kafka_share_groups_prints(
    ray_listener: KafkaListener,
    kafka4: str,  # noqa: F811 (the fixture imported above)
    capsys: pytest.CaptureFixture[str],
) -> None:
    def kafka_tool(argv: list[str]) -> tuple[int, list[str]]:
        done = run_kafka_tool(SHARE_GROUPS, kafka4, *argv, version=KAFKA_4_VERSION)
        return done.returncode, printed_lines(done)

    def raybroker(argv: list[str]) -> tuple[int, list[str]]:
        code, out, err = run(capsys, *argv)
        return code, [line for line in f"{out}\n{err}".splitlines() if line.strip()]

    on_kafka = differential(kafka4, kafka_tool)
    on_raybroker = differential(ray_listener.bootstrap_servers, raybroker)
    assert on_raybroker == on_kafka
    # What Kafka 4.2.2 printed (recorded): the lag of the three late records (two on partition 0, one on 1), none
    # once reset to the latest, and the one topic whose state was deleted.
    kafka = [(command, failed, shown) for command, failed, shown in on_kafka]
    assert kafka[4] == (
        "--describe --group {group}",
        False,
        ["GROUP TOPIC 0 0 2", "GROUP TOPIC 1 0 1", "GROUP TOPIC PARTITION START-OFFSET LAG"],
    )
    assert kafka[12][2] == ["GROUP TOPIC 0 0 5 0", "GROUP TOPIC 1 0 4 0", LEADER_EPOCH_HEADER]
    assert kafka[13][1:] == (True, ["TOPIC STATUS", "TOPIC Successful", f"no-such-topic Error: {NOT_HOSTED}"])
    assert kafka[-1][1:] == (True, [])


LEADER_EPOCH_HEADER = "GROUP TOPIC PARTITION LEADER-EPOCH START-OFFSET LAG"
NOT_HOSTED = "This server does not host this topic-partition."
