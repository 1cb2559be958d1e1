"""A quixstreams 3.28.1 application with `processing_guarantee="exactly-once"` against raybroker and against Apache
Kafka 3.9.1: the same scenario on each, and the two results compared exactly.

The application counts the records of each key of an input topic (3 partitions) in a RocksDB state store backed by
a compacted changelog topic, and writes every new count to an output topic. Exactly-once means one Kafka transaction
per checkpoint: the output records, the changelog records and the consumer group's offsets commit together, or are
aborted together. The scenario: the test writes `RECORDS` deterministic records, starts the application, SIGKILLs it
once at least `KILL_AFTER_RECORDS` input offsets are committed (but not all) while a transaction holds output
records (a crash with a transaction open), and starts it again on the same state dir and group. It is SIGTERMed
once the group's offsets reach the input's end.
quixstreams draws a new transactional.id at each start and fences a zombie through its consumer group's generation
(KIP-447), so the killed application's transaction stays open until the broker aborts it at its timeout: the
application sets transaction.timeout.ms to 10 s (librdkafka's default is 60 s), and the output is read once no
transaction is open on it (each partition's last stable offset at its high watermark). The killed application's
consumer also stays in the group until its session times out, which the application sets to 6 s, Kafka's minimum
(librdkafka's default is 45 s).

The oracle is the input: read at read_committed, the output holds for each key the counts 1..n exactly once (no
duplicate, no gap) in order, each beside the input record it counted, and n is the key's number of input records.
The application runs in an environment of its own (`python_programs`): quixstreams 3.28.1 caps confluent-kafka
below 2.13, and the project pins 2.16.1.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from tests.cluster.applications.python_programs import PythonProcess, python_environment

pytestmark = [pytest.mark.kafka, pytest.mark.ray]

# The newest quixstreams, and the confluent-kafka its <2.13 cap resolves to.
REQUIREMENTS = ["quixstreams==3.28.1", "confluent-kafka==2.12.2"]
INPUT = "quix-input"
OUTPUT = "quix-counts"
GROUP = "quix-counter"
PARTITIONS = 3
KEYS = 30
RECORDS = 3000
# The application sleeps this long per record, so that its ~10 s of work is still under way when it is killed.
DELAY_PER_RECORD_S = 0.003
KILL_AFTER_RECORDS = 600
APP_TIMEOUT_S = 120
REQUEST_TIMEOUT_S = 10
POLL_S = 0.25

APPLICATION = '''
"""Counts the records of each key; writes {"seq": input's seq, "count": count so far} per record."""
import sys
import time

from quixstreams import Application

bootstrap, group, input_name, output_name, state_dir, delay = sys.argv[1:]
app = Application(
    broker_address=bootstrap,
    consumer_group=group,
    auto_offset_reset="earliest",
    processing_guarantee="exactly-once",
    state_dir=state_dir,
    commit_interval=0.5,
    producer_extra_config={"transaction.timeout.ms": 10000},
    consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 2000},
)
source = app.topic(input_name, key_deserializer="str", value_deserializer="json")
sink = app.topic(output_name, key_serializer="str", value_serializer="json")


def count(value, state):
    time.sleep(float(delay))
    total = state.get("count", 0) + 1
    state.set("count", total)
    return {"seq": value["seq"], "count": total}


app.dataframe(source).apply(count, stateful=True).to_topic(sink)
app.run()
'''


def input_records() -> list[tuple[str, int, int]]:
    """(key, partition, seq) of each input record, in the order written; a key's records all go to one partition."""
    return [(f"key-{seq % KEYS:02d}", seq % KEYS % PARTITIONS, seq) for seq in range(RECORDS)]


@dataclass(frozen=True)
class QuixRun:
    """What one broker's scenario left."""

    # key -> [(count, input seq)] in output offset order, read at read_committed.
    counts: dict[str, list[tuple[int, int]]]
    # key -> the output partition holding its counts.
    output_partitions: dict[str, int]
    # The input offsets the group had committed when the first application was killed, and at the end.
    committed_at_kill: int
    committed_at_end: list[int]
    # Output records of aborted transactions: those the killed application had written since its last commit.
    aborted_output_records: int
    # Topics quixstreams made (its changelog) -> (partitions, cleanup.policy).
    changelogs: dict[str, tuple[int, str]]
    exit_code: int


def committed_offsets(admin: AdminClient) -> list[int]:
    """The group's committed input offsets per partition (0 where none); asked again after a retriable error (a
    broker that just started answers COORDINATOR_LOAD_IN_PROGRESS until its group coordinator has loaded)."""
    request = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(INPUT, p) for p in range(PARTITIONS)])
    deadline = time.monotonic() + APP_TIMEOUT_S
    while True:
        try:
            answer = admin.list_consumer_group_offsets([request], request_timeout=REQUEST_TIMEOUT_S)[GROUP].result()
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)
            continue
        return [max(partition.offset, 0) for partition in sorted(answer.topic_partitions, key=lambda tp: tp.partition)]


def wait_until(what: str, condition: Callable[[], bool], app: PythonProcess) -> None:
    deadline = time.monotonic() + APP_TIMEOUT_S
    while not condition():
        if app.process.poll() is not None:
            pytest.fail(f"the application exited ({app.process.returncode}) waiting for {what}:\n{tail(app)}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {APP_TIMEOUT_S} s; the application's log ends:\n{tail(app)}")
        time.sleep(POLL_S)


def tail(app: PythonProcess) -> str:
    return "\n".join(app.output().splitlines()[-60:])


def output_ends(admin: AdminClient, level: IsolationLevel) -> list[int]:
    """Each output partition's end at `level`: its last stable offset at read_committed, else its high watermark."""
    partitions = {TopicPartition(OUTPUT, partition): OffsetSpec.latest() for partition in range(PARTITIONS)}
    answers = admin.list_offsets(partitions, isolation_level=level, request_timeout=REQUEST_TIMEOUT_S)
    return [answers[partition].result().offset for partition in partitions]


def output_transaction_open(admin: AdminClient) -> bool:
    """Whether an open transaction holds output records: a last stable offset below its high watermark."""
    return output_ends(admin, IsolationLevel.READ_COMMITTED) != output_ends(admin, IsolationLevel.READ_UNCOMMITTED)


def wait_stable(admin: AdminClient) -> None:
    """Until no transaction is open on the output: each partition's last stable offset is its high watermark."""
    deadline = time.monotonic() + APP_TIMEOUT_S
    while output_transaction_open(admin):
        assert time.monotonic() < deadline, f"{OUTPUT}'s last stable offsets stay below its high watermarks"
        time.sleep(POLL_S)


def read_output(bootstrap_servers: str, isolation_level: str) -> list[tuple[str, int, dict[str, int]]]:
    """(key, partition, value) of every output record at `isolation_level`, partition by partition, to each one's
    end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "quix-test-reader",
            "enable.auto.commit": False,
            "isolation.level": isolation_level,
        }
    )
    records: list[tuple[str, int, dict[str, int]]] = []
    try:
        for partition in range(PARTITIONS):
            _, end = consumer.get_watermark_offsets(TopicPartition(OUTPUT, partition), timeout=REQUEST_TIMEOUT_S)
            consumer.assign([TopicPartition(OUTPUT, partition, 0)])
            position = 0
            deadline = time.monotonic() + APP_TIMEOUT_S
            while position < end and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    # Aborted records and control markers end a partition without a record to show for it.
                    position = consumer.position([TopicPartition(OUTPUT, partition)])[0].offset
                    continue
                key, value, offset = message.key(), message.value(), message.offset()
                assert message.error() is None and key is not None and value is not None and offset is not None
                records.append((key.decode(), partition, json.loads(value)))
                position = offset + 1
            assert position >= end, f"read {OUTPUT}[{partition}] to offset {position} of {end}"
    finally:
        consumer.close()
    return records


def changelog_topics(admin: AdminClient) -> dict[str, tuple[int, str]]:
    """The changelog topics of this application's group (quixstreams names them `changelog__<group>--...`); the
    session's Kafka also holds the changelogs of the other application tests."""
    metadata = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    names = sorted(name for name in metadata.topics if name.startswith(f"changelog__{GROUP}--"))
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    answers = {}
    for resource, future in admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S).items():
        answers[resource.name] = (
            len(metadata.topics[resource.name].partitions),
            future.result()["cleanup.policy"].value,
        )
    return answers


def run_scenario(bootstrap_servers: str, python: Path, folder: Path) -> QuixRun:
    """The module docstring's scenario on one broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.create_topics(
        [NewTopic(name, num_partitions=PARTITIONS, replication_factor=1) for name in (INPUT, OUTPUT)]
    ).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for key, partition, seq in input_records():
        producer.produce(INPUT, key=key, value=json.dumps({"seq": seq}), partition=partition)
        producer.poll(0)
    assert producer.flush(REQUEST_TIMEOUT_S) == 0
    script = folder / "counter.py"
    script.write_text(APPLICATION)
    arguments = [bootstrap_servers, GROUP, INPUT, OUTPUT, str(folder / "state"), str(DELAY_PER_RECORD_S)]

    first = PythonProcess(python, script, arguments, folder / "counter-1.log")
    try:
        # The kill lands inside a transaction that holds output records: right after a commit seen, the next
        # transaction may not have written yet (on a loaded machine, for long).
        wait_until(
            f"{KILL_AFTER_RECORDS} input records committed and output records in an open transaction",
            lambda: sum(committed_offsets(admin)) >= KILL_AFTER_RECORDS and output_transaction_open(admin),
            first,
        )
    finally:
        first.kill()
        first.stop()
    committed_at_kill = sum(committed_offsets(admin))

    second = PythonProcess(python, script, arguments, folder / "counter-2.log")
    try:
        wait_until("every input record committed", lambda: sum(committed_offsets(admin)) == RECORDS, second)
    finally:
        exit_code = second.stop()
    wait_stable(admin)
    counts: dict[str, list[tuple[int, int]]] = defaultdict(list)
    output_partitions: dict[str, int] = {}
    committed = read_output(bootstrap_servers, "read_committed")
    for key, partition, value in committed:
        counts[key].append((value["count"], value["seq"]))
        assert output_partitions.setdefault(key, partition) == partition, f"{key} in two output partitions"
    return QuixRun(
        counts=dict(counts),
        output_partitions=output_partitions,
        committed_at_kill=committed_at_kill,
        aborted_output_records=len(read_output(bootstrap_servers, "read_uncommitted")) - len(committed),
        committed_at_end=committed_offsets(admin),
        changelogs=changelog_topics(admin),
        exit_code=exit_code,
    )


@pytest.fixture(scope="module")
def quix_python() -> Path:
    return python_environment("quixstreams-3.28.1", REQUIREMENTS)


@pytest.fixture(scope="module")
def kafka_run(kafka: str, quix_python: Path, tmp_path_factory: pytest.TempPathFactory) -> QuixRun:
    return run_scenario(kafka, quix_python, tmp_path_factory.mktemp("quix-kafka"))


@pytest.fixture(scope="module")
def raybroker_run(raybroker_servers: str, quix_python: Path, tmp_path_factory: pytest.TempPathFactory) -> QuixRun:
    return run_scenario(raybroker_servers, quix_python, tmp_path_factory.mktemp("quix-raybroker"))


@pytest.fixture(params=["kafka", "raybroker"])
def run(request: pytest.FixtureRequest) -> Iterator[QuixRun]:
    yield request.getfixturevalue(f"{request.param}_run")


def test_kill_lands_mid_stream_and_restart_finishes(run: QuixRun) -> None:
    assert KILL_AFTER_RECORDS <= run.committed_at_kill < RECORDS
    assert run.aborted_output_records > 0
    assert sum(run.committed_at_end) == RECORDS
    assert run.exit_code == 0


def test_each_key_counts_one_to_n_exactly_once(run: QuixRun) -> None:
    expected: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for key, _, seq in input_records():
        expected[key].append((len(expected[key]) + 1, seq))
    assert run.counts == expected


def test_changelog_is_compacted_and_partitioned_as_input(run: QuixRun) -> None:
    assert list(run.changelogs.values()) == [(PARTITIONS, "compact")]


def test_raybroker_run_equals_kafka_run(kafka_run: QuixRun, raybroker_run: QuixRun) -> None:
    """Equal but for where the kill landed, which depends on timing."""
    timing = {"committed_at_kill": None, "aborted_output_records": None}
    assert {**vars(raybroker_run), **timing} == {**vars(kafka_run), **timing}
