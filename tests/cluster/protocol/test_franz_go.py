"""franz-go (github.com/twmb/franz-go, v1.22.3, Go) consumer group members against a raybroker listener over the
in-process broker and against Apache Kafka 4.2, the same steps on both as `test_consumer_protocol_clients.py`'s
Java members: two members split a 6-partition topic 3/3, a third joins and the group moves to 2/2/2, and records
produced before and between the steps are read. Each member is `go/consumergroupmember` (`go_programs` builds it),
written as franz-go's documentation tells a new user to: `kgo.ConsumerGroup` and `kgo.ConsumeTopics` with the
default balancers, committing after every poll and in `OnPartitionsRevoked` with rebalances blocked while a poll's
records are read (its docs' recommended pattern), so no record is read twice. Every other option keeps franz-go's
default, its 5 s fetch long poll (`kgo.FetchMaxWait`; Java's and librdkafka's is 500 ms) among them.

Which group protocol franz-go speaks: the classic one by default (JoinGroup, SyncGroup, Heartbeat with its
cooperative-sticky balancer), whatever the broker lists; KIP-848's ConsumerGroupHeartbeat only with
`kgo.ServerSideBalancer()` (new in v1.22.0) and a broker listing ConsumerGroupHeartbeat v1, its default
cooperative-sticky balancer then asking for the broker's `uniform` assignor. Both are run on both brokers. The
protocol is read twice: from the requests the members sent (each prints the first request of each kind) and from
the broker, whose group description (librdkafka's DescribeConsumerGroups) names the group's type and assignor.

The oracle is what was produced, as the producer's delivery reports named it: every record read exactly once across
the members, each step's assignments complete and balanced, no commit failed, and the same protocol, group type and
assignor on both brokers."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient

from tests.cluster.applications.programs import ProgramProcess
from tests.cluster.protocol.go_programs import go_program
from tests.cluster.protocol.test_consumer_protocol_clients import (
    DEADLINE_S,
    RECORDS_PER_STEP,
    Position,
    PrintingMember,
    balanced,
    create_topic,
    produce,
    wait_for,
)

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def member_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The franz-go member, built once for the module's tests."""
    return go_program("./consumergroupmember", tmp_path_factory.mktemp("go") / "consumergroupmember")


class FranzMember(PrintingMember):
    """One franz-go member (see the module docstring); `balancing` is "client" (franz-go's defaults) or "server"
    (`kgo.ServerSideBalancer`); `stop_file` asks it to leave."""

    def __init__(
        self, program: Path, bootstrap: str, topic: str, group: str, folder: Path, name: str, balancing: str
    ) -> None:
        stop_file = folder / f"{name}.stop"
        arguments = [str(program), bootstrap, topic, group, str(stop_file), balancing]
        super().__init__(ProgramProcess(arguments, folder / f"{name}.log"), stop_file)


def leave(members: list[FranzMember]) -> None:
    """All of `members` leave at once (a member leaving alone would start a rebalance of the others first)."""
    for member in members:
        member.stop_file.touch()
    deadline = time.monotonic() + DEADLINE_S
    for member in members:
        while "CLOSED" not in member.process.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        member.process.stop()


@dataclass(frozen=True)
class Outcome:
    """What one broker's run showed: each step's assignment sizes, how often each produced record was read, the
    group protocol the members' requests spoke ("classic", "consumer", or both names if they sent both kinds),
    the broker's description of the group at 2/2/2 (type, assignor, members) and the members' failed commits."""

    sizes: list[list[int]]
    counts: Counter[Position]
    protocol: str
    described: tuple[ConsumerGroupType, str, int]
    commit_errors: list[str]


def spoken_protocol(members: list[FranzMember]) -> str:
    sent = {name for member in members for name in member.lines("REQUEST")}
    spoken = [
        name for name, request in (("classic", "JoinGroup"), ("consumer", "ConsumerGroupHeartbeat")) if request in sent
    ]
    return "+".join(spoken) or "none"


def describe(bootstrap: str, group: str) -> tuple[ConsumerGroupType, str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(timeout=DEADLINE_S)
    return description.type, description.partition_assignor, len(description.members)


def run_steps(program: Path, bootstrap: str, folder: Path, balancing: str) -> Outcome:
    """The module docstring's steps with members of `balancing` ("client" or "server")."""
    topic, group = f"franz-{uuid.uuid4().hex[:8]}", f"franz-{balancing}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    produced = produce(bootstrap, topic, RECORDS_PER_STEP)
    members = [FranzMember(program, bootstrap, topic, group, folder, name, balancing) for name in ("a", "b")]
    sizes = []
    read = lambda: Counter(position for m in members for position in m.records())  # noqa: E731
    try:
        wait_for("a 3/3 split", lambda: balanced(members, 3), members)
        sizes.append(sorted(len(m.assignment()) for m in members))
        produced |= produce(bootstrap, topic, RECORDS_PER_STEP)
        members.append(FranzMember(program, bootstrap, topic, group, folder, "c", balancing))
        wait_for("a 2/2/2 split", lambda: balanced(members, 2), members)
        sizes.append(sorted(len(m.assignment()) for m in members))
        described = describe(bootstrap, group)
        produced |= produce(bootstrap, topic, RECORDS_PER_STEP)
        wait_for("every record read", lambda: set(read()) >= produced, members)
    finally:
        leave(members)
    counts = read()
    assert set(counts) == produced
    commit_errors = [error for member in members for error in member.lines("COMMIT-ERROR")]
    return Outcome(sizes, counts, spoken_protocol(members), described, commit_errors)


def check_on_both_brokers(
    program: Path, wall_clock_listener: str, kafka4: str, folder: Path, balancing: str
) -> dict[str, Outcome]:
    """The steps on Kafka 4.2, then on raybroker; each broker's outcome, after checking the reads and assignments."""
    outcomes = {}
    for name, bootstrap in (("kafka", kafka4), ("raybroker", wall_clock_listener)):
        (folder / name).mkdir()
        outcomes[name] = run_steps(program, bootstrap, folder / name, balancing)
    for name, outcome in outcomes.items():
        assert outcome.sizes == [[3, 3], [2, 2, 2]], name
        duplicates = [position for position, n in outcome.counts.items() if n > 1]
        assert not duplicates, (name, duplicates[:10])
        assert outcome.commit_errors == [], (name, outcome.commit_errors)
    return outcomes


def protocols(outcomes: dict[str, Outcome]) -> dict[str, tuple[str, tuple[ConsumerGroupType, str, int]]]:
    """Each broker's group protocol, as the members spoke it and the broker described it."""
    return {name: (outcome.protocol, outcome.described) for name, outcome in outcomes.items()}


def test_franz_go_defaults_use_the_classic_protocol_and_rebalance_as_on_kafka(
    member_program: Path, wall_clock_listener: str, kafka4: str, tmp_path: Path
) -> None:
    outcomes = check_on_both_brokers(member_program, wall_clock_listener, kafka4, tmp_path, "client")
    classic = ("classic", (ConsumerGroupType.CLASSIC, "cooperative-sticky", 3))
    assert protocols(outcomes) == {"kafka": classic, "raybroker": classic}


def test_franz_go_server_side_balancer_uses_the_consumer_protocol_as_on_kafka(
    member_program: Path, wall_clock_listener: str, kafka4: str, tmp_path: Path
) -> None:
    outcomes = check_on_both_brokers(member_program, wall_clock_listener, kafka4, tmp_path, "server")
    consumer = ("consumer", (ConsumerGroupType.CONSUMER, "uniform", 3))
    assert protocols(outcomes) == {"kafka": consumer, "raybroker": consumer}
