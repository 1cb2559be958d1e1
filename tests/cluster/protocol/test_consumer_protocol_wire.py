"""Kafka 4's consumer group protocol on the wire, differentially: the same sequence of raw requests
(ConsumerGroupHeartbeat v1, ConsumerGroupDescribe v1, OffsetCommit v8/v9, OffsetFetch v9, ListGroups v5,
DescribeGroups v5/v6, JoinGroup, DeleteGroups) to Apache Kafka 4.2 and to raybroker's listener, each sent to the
group's coordinator as FindCoordinator names it, once that broker knows the sequence's new topic. Every answer is
reduced to what both must agree on (error codes and messages, member and group epochs, states, how many partitions
each member owns, names of the topics) and the two lists must be equal; a difference shows the first step where they
part. Hostile steps (unknown members and groups, fenced and stale epochs, bad assignors, regexes and fields) come
between the normal ones, so each must also leave the group as it was. A second sequence does the same for static
membership (`group.instance.id`): a taken instance id, a static leave, the instance's return under a new member id,
fenced and unknown instance ids. A third moves a group between the protocols (`group.consumer.migration.policy`,
Kafka's default `bidirectional`): a classic group with a member is upgraded as a consumer member joins, its classic
member revokes and rejoins in it, and the consumer member's leave hands the group back to the classic protocol. A
fourth plays static members of the classic protocol (KIP-345): instances coming back under new member ids without a
rebalance, the ids they replaced fenced, a static leader told to skip its assignment, removals by instance id."""

from __future__ import annotations

import concurrent.futures
import itertools
import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.groups.consumer_protocol import assigned_partitions, encode_assignment
from cluster.protocol.client import WireClient
from tests.cluster.protocol.helpers import COORDINATOR_RETRIED, GROUP_KEY, coordinator_client
from tests.consumer_subscriptions import subscription

pytestmark = pytest.mark.kafka

DESCRIBE_GROUPS, LIST_GROUPS = 15, 16
METADATA, CREATE_TOPICS, DELETE_GROUPS, HEARTBEAT, DESCRIBE = 3, 19, 42, 68, 69
OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, CLASSIC_HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 11, 12, 13, 14
PARTITIONS = 3
DEADLINE_S = 30.0


class Side:
    """One broker: a connection to its bootstrap, and one to the coordinator of the sequence's group."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic
        self.address = bootstrap
        self.bootstrap = WireClient(bootstrap, timeout_s=DEADLINE_S)
        created = self.bootstrap.request(
            CREATE_TOPICS,
            5,
            {
                "topics": [
                    {
                        "name": topic,
                        "num_partitions": PARTITIONS,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout": 30000,
            },
        )
        assert created.topics[0].error_code == ErrorCode.none, created
        self.coordinator = coordinator_client(bootstrap, group, GROUP_KEY, DEADLINE_S)
        self._await_topic_on_coordinator()
        self._await_topic_in_assignments()
        metadata = self.bootstrap.request(
            METADATA,
            12,
            {
                "topics": [{"name": topic, "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        self.names = {t.topic_id: t.name for t in metadata.topics}
        self.topic_id = next(t.topic_id for t in metadata.topics)

    def _await_topic_on_coordinator(self) -> None:
        """Waits until the coordinator's broker knows the new topic with a leader for every partition: Kafka's
        group coordinator assigns from its broker's metadata, which learns of a new topic a moment after CreateTopics
        answers (a join before that is assigned nothing, at the same epoch)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            answer = self.coordinator.request(
                METADATA,
                12,
                {
                    "topics": [{"name": self.topic, "topic_id": None}],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
            (topic,) = answer.topics
            leaders = [partition.leader_id for partition in topic.partitions]
            if topic.error_code == ErrorCode.none and len(leaders) == PARTITIONS and min(leaders) >= 0:
                return
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)

    def _await_topic_in_assignments(self) -> None:
        """Waits until the group coordinator itself assigns the new topic: a member of a throwaway group joins, and
        leaves, until its first answer holds every partition. Kafka's coordinator takes the metadata image a moment
        after its broker's Metadata answers from it (under load, a join in between is assigned nothing); raybroker's
        assigns at once."""
        deadline = time.monotonic() + DEADLINE_S
        for attempt in itertools.count():
            probe = f"{self.group}-probe-{attempt}"
            joined = self.call(
                HEARTBEAT,
                1,
                {
                    "group_id": probe,
                    "member_id": "probe",
                    "member_epoch": 0,
                    "rebalance_timeout": 30000,
                    "subscribed_topic_names": [self.topic],
                    "topic_partitions": [],
                },
            )
            assert joined.error_code == ErrorCode.none, joined
            leave = {"group_id": probe, "member_id": "probe", "member_epoch": -1, "topic_partitions": None}
            self.call(HEARTBEAT, 1, leave)
            if joined.assignment is not None and sum(len(t.partitions) for t in joined.assignment.topic_partitions):
                return
            assert time.monotonic() < deadline, joined
            time.sleep(0.2)

    def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            answer = self.coordinator.request(api_key, version, values)
            if getattr(answer, "error_code", None) not in COORDINATOR_RETRIED:
                return answer
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)

    def heartbeat(self, member: str, epoch: int, **fields: Any) -> Any:
        values = {
            "group_id": self.group,
            "member_id": member,
            "member_epoch": epoch,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": -1,
            "subscribed_topic_names": None,
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": None,
            **fields,
        }
        return self.call(HEARTBEAT, 1, values)

    def join(self, member: str, **fields: Any) -> Any:
        defaults = {"rebalance_timeout": 30000, "subscribed_topic_names": [self.topic], "topic_partitions": []}
        return self.heartbeat(member, 0, **{**defaults, **fields})

    def owned(self, partitions: set[int]) -> list[dict[str, Any]]:
        return [{"topic_id": self.topic_id, "partitions": sorted(partitions)}]


def seen(answer: Any) -> tuple[Any, ...]:
    """What both brokers must agree on of a heartbeat answer."""
    assignment = None
    if answer.assignment is not None:
        assignment = sum(len(t.partitions) for t in answer.assignment.topic_partitions)
    return (answer.error_code, answer.error_message, answer.member_epoch, assignment)


def mine(answer: Any) -> set[int]:
    return {p for t in answer.assignment.topic_partitions for p in t.partitions}


def run_sequence(side: Side) -> list[tuple[str, Any]]:
    steps: list[tuple[str, Any]] = []
    group = side.group
    first = side.join("m1")
    steps.append(("m1 joins", seen(first)))
    steps.append(("a greater epoch", seen(side.heartbeat("m1", 7))))
    steps.append(("an unknown member", seen(side.heartbeat("nobody", 1))))
    steps.append(
        (
            "an unknown group",
            seen(
                side.call(
                    HEARTBEAT,
                    1,
                    {
                        "group_id": f"{group}-x",
                        "member_id": "m",
                        "member_epoch": 1,
                        "rebalance_timeout": -1,
                        "topic_partitions": None,
                    },
                )
            ),
        )
    )
    steps.append(("an unknown assignor", seen(side.join("m9", server_assignor="sticky"))))
    steps.append(("a bad regex", seen(side.join("m9", subscribed_topic_names=None, subscribed_topic_regex="(?=x)"))))
    steps.append(("no rebalance timeout", seen(side.join("m9", rebalance_timeout=-1))))
    steps.append(("no member id", seen(side.join(""))))
    steps.append(("owned partitions on join", seen(side.join("m9", topic_partitions=side.owned({0})))))
    steps.append(("epoch -3", seen(side.heartbeat("m1", -3))))
    second = side.join("m2")
    steps.append(("m2 joins", seen(second)))
    revoking = side.heartbeat("m1", 1, topic_partitions=side.owned({0, 1, 2}))
    steps.append(("m1 is asked to revoke", seen(revoking)))
    kept = mine(revoking)
    steps.append(("m1 revoked", seen(side.heartbeat("m1", 1, topic_partitions=side.owned(kept)))))
    steps.append(("m2 takes the rest", seen(side.heartbeat("m2", 2, topic_partitions=[]))))

    def commit(version: int, member: str, epoch: int) -> Any:
        answer = side.call(
            OFFSET_COMMIT,
            version,
            {
                "group_id": group,
                "generation_id_or_member_epoch": epoch,
                "member_id": member,
                "group_instance_id": None,
                "retention_time": -1,
                "topics": [
                    {
                        "name": side.topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": 0,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                            for p in sorted(kept)
                        ],
                    }
                ],
            },
        )
        return [p.error_code for t in answer.topics for p in t.partitions]

    steps.append(("commit in the member epoch", commit(9, "m1", 2)))
    steps.append(("commit in a stale epoch", commit(9, "m1", 1)))
    steps.append(("commit of an unknown member", commit(9, "x", 2)))
    steps.append(("commit with v8", commit(8, "m1", 2)))

    def fetch(member: str | None, epoch: int) -> Any:
        answer = side.call(
            OFFSET_FETCH,
            9,
            {
                "groups": [{"group_id": group, "member_id": member, "member_epoch": epoch, "topics": None}],
                "require_stable": False,
            },
        )
        fetched = answer.groups[0]
        return fetched.error_code, sorted(
            (t.name, p.partition_index, p.committed_offset) for t in fetched.topics for p in t.partitions
        )

    steps.append(("fetch in the member epoch", fetch("m1", 2)))
    steps.append(("fetch in a stale epoch", fetch("m1", 1)))
    steps.append(("fetch of an unknown member", fetch("x", 2)))
    steps.append(("fetch of no member", fetch(None, -1)))

    described = side.call(DESCRIBE, 1, {"group_ids": [group, f"{group}-x"], "include_authorized_operations": False})
    steps.append(
        (
            "describe",
            [
                (
                    g.error_code,
                    g.error_message,
                    g.group_state,
                    g.group_epoch,
                    g.assignment_epoch,
                    g.assignor_name,
                    sorted(
                        (
                            m.member_id,
                            m.member_epoch,
                            tuple(m.subscribed_topic_names),
                            m.subscribed_topic_regex,
                            m.client_id,
                            m.member_type,
                            sorted(side.names.get(t.topic_id, "?") for t in m.assignment.topic_partitions),
                            sum(len(t.partitions) for t in m.assignment.topic_partitions),
                            sum(len(t.partitions) for t in m.target_assignment.topic_partitions),
                        )
                        for m in g.members
                    ),
                )
                for g in described.groups
            ],
        )
    )
    listed = side.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    steps.append(
        ("list", [(g.group_type, g.group_state, g.protocol_type) for g in listed.groups if g.group_id == group])
    )
    listed = side.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["classic"]})
    steps.append(("list classic", [g.group_id for g in listed.groups if g.group_id == group]))
    for version in (5, 6):
        old = side.call(DESCRIBE_GROUPS, version, {"groups": [group], "include_authorized_operations": False})
        steps.append(
            (
                f"describe groups v{version}",
                [(g.error_code, g.group_state, g.protocol_type, g.protocol_data, len(g.members)) for g in old.groups],
            )
        )
    classic = side.call(
        JOIN_GROUP,
        9,
        {
            "group_id": group,
            "session_timeout": 10000,
            "rebalance_timeout": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
            "reason": None,
        },
    )
    steps.append(("a classic join", classic.error_code))
    deleted = side.call(DELETE_GROUPS, 2, {"groups_names": [group]})
    steps.append(("delete with members", [r.error_code for r in deleted.results]))
    steps.append(("m2 leaves", seen(side.heartbeat("m2", -1))))
    steps.append(("m1 leaves", seen(side.heartbeat("m1", -1))))
    steps.append(("m1 again", seen(side.heartbeat("m1", 2))))
    described = side.call(DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})
    steps.append(
        ("describe empty", [(g.error_code, g.group_state, g.group_epoch, len(g.members)) for g in described.groups])
    )
    deleted = side.call(DELETE_GROUPS, 2, {"groups_names": [group]})
    steps.append(("delete empty", [r.error_code for r in deleted.results]))
    return steps


def test_consumer_protocol_answers_as_kafka_4(wall_clock_listener: str, kafka4: str) -> None:
    run = uuid.uuid4().hex[:8]
    kafka = run_sequence(Side(kafka4, f"wire-{run}", f"wire-{run}"))
    ours = run_sequence(Side(wall_clock_listener, f"wire-{run}", f"wire-{run}"))
    assert_same(kafka, ours)


def described_members(side: Side) -> tuple[Any, ...]:
    (group,) = side.call(DESCRIBE, 1, {"group_ids": [side.group], "include_authorized_operations": False}).groups
    members = sorted(
        (m.instance_id, m.member_epoch, sum(len(t.partitions) for t in m.assignment.topic_partitions))
        for m in group.members
    )
    return (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch, members)


def run_static_sequence(side: Side) -> list[tuple[str, Any]]:
    everything = side.owned(set(range(PARTITIONS)))
    steps: list[tuple[str, Any]] = [("a joins as i1", seen(side.join("s-a", instance_id="i1")))]
    steps.append(("a owns all", seen(side.heartbeat("s-a", 1, instance_id="i1", topic_partitions=everything))))
    steps.append(("b joins as i1 too", seen(side.join("s-b", instance_id="i1"))))
    steps.append(("c joins as i2", seen(side.join("s-c", instance_id="i2"))))
    revoking = side.heartbeat("s-a", 1, instance_id="i1", topic_partitions=everything)
    steps.append(("a is asked to revoke", seen(revoking)))
    steps.append(("described", described_members(side)))
    steps.append(("a leaves for now", seen(side.heartbeat("s-a", -2, instance_id="i1"))))
    steps.append(("described after the static leave", described_members(side)))
    steps.append(("a after its leave", seen(side.heartbeat("s-a", 2, instance_id="i1"))))
    steps.append(("b joins as i1", seen(side.join("s-b", instance_id="i1"))))
    steps.append(("described after the return", described_members(side)))
    steps.append(("a fenced by b", seen(side.heartbeat("s-a", 2, instance_id="i1"))))
    steps.append(("an unknown instance", seen(side.heartbeat("s-b", 2, instance_id="i9"))))
    steps.append(("a static leave without an instance", seen(side.heartbeat("s-c", -2))))
    steps.append(("c leaves", seen(side.heartbeat("s-c", -1, instance_id="i2"))))
    steps.append(("b leaves", seen(side.heartbeat("s-b", -1, instance_id="i1"))))
    steps.append(("described at the end", described_members(side)))
    return steps


def test_static_membership_answers_as_kafka_4(wall_clock_listener: str, kafka4: str) -> None:
    run = uuid.uuid4().hex[:8]
    kafka = run_static_sequence(Side(kafka4, f"static-{run}", f"static-{run}"))
    ours = run_static_sequence(Side(wall_clock_listener, f"static-{run}", f"static-{run}"))
    assert_same(kafka, ours)


def assert_same(kafka: list[tuple[str, Any]], ours: list[tuple[str, Any]]) -> None:
    """Both brokers answered every step alike (each difference is named)."""
    differences = [
        f"{step}: Kafka 4.2 answered {expected}, raybroker {got}"
        for (step, expected), (_, got) in zip(kafka, ours, strict=True)
        if got != expected
    ]
    assert not differences, "\n".join(differences)


def classic_join(
    side: Side,
    member: str,
    owned: set[int],
    protocols: tuple[str, ...] = ("range",),
    instance: str | None = None,
    version: int = 9,
) -> Any:
    """A classic consumer's JoinGroup (v9 unless told) subscribing to the side's topic, owning `owned` of it."""
    metadata = subscription([side.topic], {side.topic: sorted(owned)})
    return side.call(
        JOIN_GROUP,
        version,
        {
            "group_id": side.group,
            "session_timeout": 10000,
            "rebalance_timeout": 10000,
            "member_id": member,
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": metadata} for name in protocols],
            "reason": None,
        },
    )


def joined(answer: Any, members: dict[str, str]) -> tuple[Any, ...]:
    """What both must agree on of a JoinGroup answer: the leader and members by their role in the sequence."""
    roles = {member_id: role for role, member_id in members.items()}
    return (
        answer.error_code,
        answer.generation_id,
        answer.protocol_type,
        answer.protocol_name,
        roles.get(answer.leader, answer.leader),
        sorted((roles.get(m.member_id, "?"), m.group_instance_id) for m in answer.members),
        getattr(answer, "skip_assignment", False),
    )


def classic_sync(
    side: Side,
    member: str,
    generation: int,
    plan: dict[str, set[int]] | None = None,
    name: str = "range",
    instance: str | None = None,
) -> tuple[int, set[int]]:
    """A classic member's SyncGroup v5 (the leader's with its `plan`): (error code, its partitions)."""
    answer = side.call(
        SYNC_GROUP,
        5,
        {
            "group_id": side.group,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocol_name": name,
            "assignments": [
                {"member_id": each, "assignment": encode_assignment({side.topic: sorted(parts)}, 1)}
                for each, parts in (plan or {}).items()
            ],
        },
    )
    parts = {p for topic, p in assigned_partitions(answer.assignment) if topic == side.topic}
    return answer.error_code, parts


def classic_heartbeat(side: Side, member: str, generation: int, instance: str | None = None) -> Any:
    body = {"group_id": side.group, "generation_id": generation, "member_id": member, "group_instance_id": instance}
    return side.call(CLASSIC_HEARTBEAT, 4, body).error_code


def described_group(side: Side) -> tuple[Any, ...]:
    """ConsumerGroupDescribe and DescribeGroups of the group, reduced to what both must agree on."""
    (modern,) = side.call(DESCRIBE, 1, {"group_ids": [side.group], "include_authorized_operations": False}).groups
    (classic,) = side.call(DESCRIBE_GROUPS, 5, {"groups": [side.group], "include_authorized_operations": False}).groups
    return (
        modern.error_code,
        modern.error_message,
        modern.group_state,
        modern.group_epoch,
        sorted((m.member_type, m.member_epoch, tuple(m.subscribed_topic_names)) for m in modern.members),
        classic.error_code,
        classic.group_state,
        classic.protocol_type,
        len(classic.members),
    )


def run_migration_sequence(side: Side) -> list[tuple[str, Any]]:
    steps: list[tuple[str, Any]] = []
    first = classic_join(side, "", set())
    steps.append(("a classic member asks for an id", first.error_code))
    members = {"a": first.member_id}
    first = classic_join(side, members["a"], set())
    steps.append(("the classic member joins", joined(first, members)))
    generation = first.generation_id
    steps.append(("it syncs", classic_sync(side, members["a"], generation, {members["a"]: set(range(PARTITIONS))})))
    steps.append(("described classic", described_group(side)))
    steps.append(("a consumer member joins", seen(side.join("c"))))
    steps.append(("described upgraded", described_group(side)))
    steps.append(("the classic member's heartbeat", classic_heartbeat(side, members["a"], generation)))
    rejoined = classic_join(side, members["a"], set(range(PARTITIONS)))
    steps.append(("it joins again owning all", joined(rejoined, members)))
    synced = classic_sync(side, members["a"], rejoined.generation_id)
    steps.append(("its sync", synced))
    steps.append(("its heartbeat while revoking", classic_heartbeat(side, members["a"], rejoined.generation_id)))
    rejoined = classic_join(side, members["a"], synced[1])
    steps.append(("it joins again having revoked", joined(rejoined, members)))
    steps.append(("its sync after revoking", classic_sync(side, members["a"], rejoined.generation_id)))
    generation = rejoined.generation_id
    steps.append(("its heartbeat in the group's epoch", classic_heartbeat(side, members["a"], generation)))
    steps.append(("the consumer member takes the rest", seen(side.heartbeat("c", 2, topic_partitions=[]))))
    steps.append(("described reconciled", described_group(side)))
    steps.append(("a heartbeat in another generation", classic_heartbeat(side, members["a"], generation + 5)))
    steps.append(("a heartbeat of a consumer member", classic_heartbeat(side, "c", generation)))
    steps.append(("a heartbeat of nobody", classic_heartbeat(side, "nobody", generation)))
    steps.append(("a sync of another protocol", classic_sync(side, members["a"], generation, name="roundrobin")[0]))
    other = classic_join(side, "intruder", set(), protocols=("roundrobin",))
    steps.append(("a join with a protocol nobody lists", other.error_code))
    listed = side.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    steps.append(("list", [(g.group_type, g.protocol_type) for g in listed.groups if g.group_id == side.group]))
    steps.append(("the consumer member leaves", seen(side.heartbeat("c", -1))))
    steps.append(("described downgraded", described_group(side)))
    steps.append(("the classic member's heartbeat after", classic_heartbeat(side, members["a"], generation)))
    back = classic_join(side, members["a"], synced[1])
    steps.append(("it joins the classic group", joined(back, members)))
    plan = {members["a"]: set(range(PARTITIONS))}
    steps.append(("it syncs as its leader", classic_sync(side, members["a"], back.generation_id, plan)))
    left = side.call(
        LEAVE_GROUP,
        5,
        {"group_id": side.group, "members": [{"member_id": members["a"], "group_instance_id": None, "reason": None}]},
    )
    steps.append(("it leaves", [m.error_code for m in left.members]))
    steps.append(("described at the end", described_group(side)))
    return steps


def test_a_group_moves_between_the_protocols_as_on_kafka_4(wall_clock_listener: str, kafka4: str) -> None:
    run = uuid.uuid4().hex[:8]
    kafka = run_migration_sequence(Side(kafka4, f"migrate-{run}", f"migrate-{run}"))
    ours = run_migration_sequence(Side(wall_clock_listener, f"migrate-{run}", f"migrate-{run}"))
    assert_same(kafka, ours)


def run_classic_static_sequence(side: Side) -> list[tuple[str, Any]]:
    """Static members of the classic protocol (KIP-345): instances i1 and i2 share the topic, each comes back under
    a new member id and takes its place without a rebalance, the ids they replaced are fenced, and an
    administrator removes one by its instance id."""
    steps: list[tuple[str, Any]] = []
    roles: dict[str, str] = {}
    first = classic_join(side, "", set(), instance="i1")
    roles["a"] = first.member_id
    steps.append(("a joins as i1", joined(first, roles)))
    steps.append(
        ("a syncs alone", classic_sync(side, roles["a"], 1, {roles["a"]: set(range(PARTITIONS))}, instance="i1"))
    )
    second_side = coordinator_client(side.address, side.group, GROUP_KEY, DEADLINE_S)
    with concurrent.futures.ThreadPoolExecutor(1) as pool, second_side:
        metadata = subscription([side.topic], {})
        pending = pool.submit(
            second_side.request,
            JOIN_GROUP,
            9,
            {
                "group_id": side.group,
                "session_timeout": 10000,
                "rebalance_timeout": 10000,
                "member_id": "",
                "group_instance_id": "i2",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": metadata}],
                "reason": None,
            },
        )
        deadline = time.monotonic() + DEADLINE_S
        while (beat := classic_heartbeat(side, roles["a"], 1, "i1")) == ErrorCode.none:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        steps.append(("a told to rejoin", beat))
        rejoined = classic_join(side, roles["a"], set(range(PARTITIONS)), instance="i1")
        second = pending.result(DEADLINE_S)
    roles["b"] = second.member_id
    steps.append(("a rejoins", joined(rejoined, roles)))
    steps.append(("b joins as i2", joined(second, roles)))
    plan = {roles["a"]: {0}, roles["b"]: set(range(1, PARTITIONS))}
    steps.append(("a syncs the plan", classic_sync(side, roles["a"], 2, plan, instance="i1")))
    steps.append(("b syncs", classic_sync(side, roles["b"], 2, instance="i2")))
    back = classic_join(side, "", set(), instance="i2")
    roles["b2"] = back.member_id
    steps.append(("b back under a new id", joined(back, roles)))
    steps.append(("b back syncs", classic_sync(side, roles["b2"], 2, instance="i2")))
    steps.append(("the replaced id with its instance", classic_heartbeat(side, roles["b"], 2, "i2")))
    steps.append(("the replaced id alone", classic_heartbeat(side, roles["b"], 2)))
    steps.append(("the replaced id syncs", classic_sync(side, roles["b"], 2, instance="i2")[0]))
    steps.append(("the replaced id joins", classic_join(side, roles["b"], set(), instance="i2").error_code))
    steps.append(("a goes on", classic_heartbeat(side, roles["a"], 2, "i1")))
    steps.append(("an unknown instance", classic_heartbeat(side, roles["b2"], 2, "i9")))
    leader_back = classic_join(side, "", set(), instance="i1")
    roles["a2"] = leader_back.member_id
    steps.append(("the leader back on v9", joined(leader_back, roles)))
    steps.append(("the leader back syncs", classic_sync(side, roles["a2"], 2, instance="i1")))
    before_v9 = classic_join(side, "", set(), instance="i1", version=8)
    roles["a3"] = before_v9.member_id
    steps.append(("the leader back on v8", joined(before_v9, roles)))
    left = side.call(
        LEAVE_GROUP,
        5,
        {
            "group_id": side.group,
            "members": [
                {"member_id": "", "group_instance_id": "i2", "reason": None},
                {"member_id": "", "group_instance_id": "i9", "reason": None},
                {"member_id": "someone", "group_instance_id": "i1", "reason": None},
            ],
        },
    )
    steps.append(("an administrator's removals", [(m.group_instance_id, m.error_code) for m in left.members]))
    steps.append(("the last one after", classic_heartbeat(side, roles["a3"], 2, "i1")))
    names = {member_id: role for role, member_id in roles.items()}
    (described,) = side.call(
        DESCRIBE_GROUPS, 5, {"groups": [side.group], "include_authorized_operations": False}
    ).groups
    steps.append(
        (
            "described",
            (
                described.group_state,
                sorted((names.get(m.member_id, "?"), m.group_instance_id) for m in described.members),
            ),
        )
    )
    return steps


def test_classic_static_members_answer_as_kafka_4(wall_clock_listener: str, kafka4: str) -> None:
    run = uuid.uuid4().hex[:8]
    kafka = run_classic_static_sequence(Side(kafka4, f"cstatic-{run}", f"cstatic-{run}"))
    ours = run_classic_static_sequence(Side(wall_clock_listener, f"cstatic-{run}", f"cstatic-{run}"))
    assert_same(kafka, ours)
