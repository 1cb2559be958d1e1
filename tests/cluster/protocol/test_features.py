"""Finalized features (ApiVersions' features, UpdateFeatures) against Apache Kafka 4.2 as the oracle (the package's
two Kafka 4.2 brokers, `kafka4`), over real sockets and with Kafka 4.2's own `kafka-features`.

- The same raw UpdateFeatures requests (v0, v1, v2: an unknown feature, an unknown upgrade type, a level below 0, a
  valid downgrade with `validate_only`) get the same answers from both brokers, the controller's node id aside.
- ApiVersions v3 and v4 carry the features as Kafka's broker does: each finalized level (min equal to max, never 0)
  within what the broker supports, an epoch, and v3 without the supported features whose lowest level is 0.
- `kafka-features` prints the same lines on both for an unknown feature, a level the broker does not support (Kafka's
  own answer for a feature it supports at 0 only) and a dry-run downgrade, and both refuse a level beyond what they
  support; `describe` prints raybroker's features in Kafka's format, `transaction.version` as Kafka 4.2 does, and a
  change moves the epoch at once on raybroker, eventually on Kafka (its brokers learn it from the metadata log).
  `transaction.version` is set back to 2 on both afterwards.
- `group.version` turns the consumer group protocol on and off alike: at 0 a ConsumerGroupHeartbeat and a
  ConsumerGroupDescribe answer UNSUPPORTED_VERSION on both, at 1 (a new cluster's level, set back afterwards) a member
  joins at epoch 1 and the group is described Stable.
- `share.version` turns share groups on and off alike: at 0 ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch,
  ShareAcknowledge and the three share-group offset APIs answer UNSUPPORTED_VERSION on both, with Kafka's messages
  where the answer has one; at 1 (a new cluster's level, set back afterwards) a member joins at epoch 1.
"""

from __future__ import annotations

import functools
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsV4
from kio.schema.update_features.v0.request import FeatureUpdateKey as UpdateV0
from kio.schema.update_features.v0.request import UpdateFeaturesRequest as UpdateFeaturesV0
from kio.schema.update_features.v1.request import FeatureUpdateKey as UpdateV1
from kio.schema.update_features.v1.request import UpdateFeaturesRequest as UpdateFeaturesV1
from kio.schema.update_features.v2.request import FeatureUpdateKey as UpdateV2
from kio.schema.update_features.v2.request import UpdateFeaturesRequest as UpdateFeaturesV2
from kio.static.primitive import i8, i16

from actors.core.controller.finalized_features import (
    GROUP_VERSION,
    GROUP_VERSION_LEVEL,
    METADATA_VERSION,
    METADATA_VERSION_LEVEL,
    SHARE_VERSION,
    SHARE_VERSION_LEVEL,
    TRANSACTION_VERSION,
    TRANSACTION_VERSION_LEVEL,
)
from benchmarks.kafka_broker import KAFKA_4_VERSION
from tests.cluster.protocol.helpers import (
    GROUP_KEY,
    coordinator_client,
    exchange,
    run,
    start_broker,
    start_local_listener,
)
from tests.cluster.protocol.kafka_tools import FEATURES, printed_lines, run_kafka_tool

pytestmark = pytest.mark.kafka

DEADLINE_S = 30.0
CONTROLLER = re.compile(r"Local controller \d+")
DESCRIBED = re.compile(
    r"Feature: (\S+)\tSupportedMinVersion: (\S+)\tSupportedMaxVersion: (\S+)\tFinalizedVersionLevel: (\S+)\t"
    r"Epoch: (\d+)"
)
RAW_REQUESTS: list[Any] = [
    UpdateFeaturesV1(feature_updates=(UpdateV1(feature="nosuch.version", max_version_level=i16(1)),)),
    UpdateFeaturesV1(
        feature_updates=(UpdateV1(feature="transaction.version", max_version_level=i16(0), upgrade_type=i8(5)),)
    ),
    UpdateFeaturesV1(
        feature_updates=(UpdateV1(feature="transaction.version", max_version_level=i16(-1), upgrade_type=i8(2)),)
    ),
    UpdateFeaturesV1(
        feature_updates=(UpdateV1(feature="transaction.version", max_version_level=i16(0), upgrade_type=i8(2)),),
        validate_only=True,
    ),
    UpdateFeaturesV2(
        feature_updates=(UpdateV2(feature="transaction.version", max_version_level=i16(0), upgrade_type=i8(2)),),
        validate_only=True,
    ),
    UpdateFeaturesV0(
        feature_updates=(UpdateV0(feature="nosuch.version", max_version_level=i16(1), allow_downgrade=True),)
    ),
]
SAME_ON_BOTH = [
    ["upgrade", "--feature", "nosuch.version=1"],
    ["downgrade", "--feature", "transaction.version=0", "--dry-run"],
]


@pytest.fixture(scope="module")
def raybroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The in-process broker behind a Kafka listener."""
    broker = start_broker(tmp_path_factory.mktemp("features"))
    try:
        with start_local_listener(broker) as listener:
            yield listener.bootstrap_servers
    finally:
        broker.close()


def port(bootstrap: str) -> int:
    return int(bootstrap.split(",")[0].rsplit(":", 1)[1])


def features_tool(bootstrap: str, *arguments: str) -> tuple[int, list[str]]:
    """Kafka 4.2's kafka-features run to its end: exit code and printed lines, the controller's id written N."""
    ran = run_kafka_tool(FEATURES, bootstrap, *arguments, version=KAFKA_4_VERSION)
    return ran.returncode, [CONTROLLER.sub("Local controller N", line) for line in printed_lines(ran)]


def described(bootstrap: str) -> dict[str, tuple[str, ...]]:
    """`kafka-features describe`: each feature's supported range, finalized level and epoch."""
    code, lines = features_tool(bootstrap, "describe")
    assert code == 0, lines
    found = {}
    for line in lines:
        match = DESCRIBED.fullmatch(line)
        assert match is not None, line
        found[match[1]] = match.groups()[1:]
    return found


def test_raw_update_features_answers_are_kafkas(kafka4: str, raybroker: str) -> None:
    for request in RAW_REQUESTS:
        oracle, ours = (run(exchange(port(bootstrap), request))[1] for bootstrap in (kafka4, raybroker))
        message = ours.error_message and CONTROLLER.sub("Local controller N", ours.error_message)
        assert (ours.error_code, message) == (
            oracle.error_code,
            oracle.error_message and CONTROLLER.sub("Local controller N", oracle.error_message),
        ), request
        assert getattr(ours, "results", ()) == getattr(oracle, "results", ()), request


def finalized(answer: Any) -> set[tuple[str, int, int]]:
    """An ApiVersions answer's finalized features: (name, lowest level, highest level)."""
    return {(key.name, key.min_version_level, key.max_version_level) for key in answer.finalized_features}


def test_api_versions_carry_the_features_as_kafkas_broker(kafka4: str, raybroker: str) -> None:
    for bootstrap in (kafka4, raybroker):
        v3 = run(exchange(port(bootstrap), ApiVersionsV3(client_software_name="t", client_software_version="1")))[1]
        v4 = run(exchange(port(bootstrap), ApiVersionsV4(client_software_name="t", client_software_version="1")))[1]
        supported = {key.name: (key.min_version, key.max_version) for key in v4.supported_features}
        assert {key.name for key in v3.supported_features} == {n for n, (low, _) in supported.items() if low > 0}
        assert finalized(v3) == finalized(v4) and v4.finalized_features_epoch >= 0
        for key in v4.finalized_features:
            low, high = supported[key.name]
            assert 0 < key.min_version_level == key.max_version_level and low <= key.max_version_level <= high
    assert finalized(v4) == {
        (METADATA_VERSION, METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
        (TRANSACTION_VERSION, TRANSACTION_VERSION_LEVEL, TRANSACTION_VERSION_LEVEL),
        (GROUP_VERSION, GROUP_VERSION_LEVEL, GROUP_VERSION_LEVEL),
        (SHARE_VERSION, SHARE_VERSION_LEVEL, SHARE_VERSION_LEVEL),
    }


def test_kafka_features_prints_kafkas_lines_and_a_change_moves_the_epoch(kafka4: str, raybroker: str) -> None:
    for step in SAME_ON_BOTH:
        assert features_tool(raybroker, *step) == features_tool(kafka4, *step), step
    ours = described(raybroker)
    assert ours == {
        METADATA_VERSION: ("3.9-IV0", "3.9-IV0", "3.9-IV0", ours[METADATA_VERSION][-1]),
        TRANSACTION_VERSION: ("0", "2", "2", ours[METADATA_VERSION][-1]),
        GROUP_VERSION: ("0", "1", "1", ours[METADATA_VERSION][-1]),
        SHARE_VERSION: ("0", "1", "1", ours[METADATA_VERSION][-1]),
    }
    oracle = described(kafka4)
    assert [oracle[name][:3] for name in (TRANSACTION_VERSION, GROUP_VERSION, SHARE_VERSION)] == [
        ours[name][:3] for name in (TRANSACTION_VERSION, GROUP_VERSION, SHARE_VERSION)
    ]
    too_new = ["upgrade", "--feature", "transaction.version=3"]
    assert features_tool(raybroker, *too_new) == features_tool(kafka4, *too_new)

    oracle_epoch = int(described(kafka4)[METADATA_VERSION][-1])
    try:
        for bootstrap in (raybroker, kafka4):
            changed = features_tool(bootstrap, "downgrade", "--feature", "transaction.version=0")
            assert changed == (0, ["transaction.version was downgraded to 0."])
        assert int(described(raybroker)[METADATA_VERSION][-1]) > int(ours[METADATA_VERSION][-1])
        deadline = time.monotonic() + DEADLINE_S
        while int(described(kafka4)[METADATA_VERSION][-1]) <= oracle_epoch:
            assert time.monotonic() < deadline, "Kafka's epoch did not move"
            time.sleep(0.5)
    finally:
        for bootstrap in (kafka4, raybroker):
            restored = features_tool(bootstrap, "upgrade", "--feature", "transaction.version=2")
            assert restored == (0, ["transaction.version was upgraded to 2."])


def test_group_version_turns_the_consumer_protocol_on_and_off_as_on_kafka(kafka4: str, raybroker: str) -> None:
    answers: dict[str, list[tuple[Any, ...]]] = {}
    try:
        for name, bootstrap in (("kafka", kafka4), ("raybroker", raybroker)):
            changed = features_tool(bootstrap, "downgrade", "--feature", f"{GROUP_VERSION}=0")
            assert changed == (0, [f"{GROUP_VERSION} was downgraded to 0."]), name
            off = until_answered(bootstrap, lambda answer: answer[0] != 0)
            restored = features_tool(bootstrap, "upgrade", "--feature", f"{GROUP_VERSION}={GROUP_VERSION_LEVEL}")
            assert restored == (0, [f"{GROUP_VERSION} was upgraded to {GROUP_VERSION_LEVEL}."]), name
            answers[name] = [off, until_answered(bootstrap, lambda answer: answer[0] == 0)]
    finally:
        for bootstrap in (kafka4, raybroker):
            features_tool(bootstrap, "upgrade", "--feature", f"{GROUP_VERSION}={GROUP_VERSION_LEVEL}")
    assert answers["raybroker"] == answers["kafka"]
    assert answers["kafka"][0][0] == 35 and answers["kafka"][1][:2] == (0, 1)


def until_answered(bootstrap: str, wanted: Any) -> tuple[Any, ...]:
    """`consumer_protocol_answers` once `wanted` holds (Kafka's brokers learn a feature change from the metadata
    log)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = consumer_protocol_answers(bootstrap)
        if wanted(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


def consumer_protocol_answers(bootstrap: str) -> tuple[Any, ...]:
    """A new member's join of a new group, then that group described: (heartbeat code, epoch, message, whether a
    member id came back, describe code, message, group state)."""
    group = f"gv-{uuid.uuid4().hex[:8]}"
    with coordinator_client(bootstrap, group, GROUP_KEY, DEADLINE_S) as client:
        member = uuid.uuid4().hex[:22]
        join = {
            "group_id": group,
            "member_id": member,
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": 30000,
            "subscribed_topic_names": [f"{group}-none"],
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [],
        }
        joined = client.request(68, 1, join)
        (described,) = client.request(69, 1, {"group_ids": [group], "include_authorized_operations": False}).groups
        if joined.error_code == 0:
            client.request(68, 1, {**join, "member_epoch": -1, "rebalance_timeout": -1, "topic_partitions": None})
    return (
        int(joined.error_code),
        joined.member_epoch,
        joined.error_message,
        joined.member_id is not None,
        int(described.error_code),
        described.error_message,
        described.group_state,
    )


def test_share_version_turns_share_groups_on_and_off_as_on_kafka(kafka4: str, raybroker: str) -> None:
    answers: dict[str, list[tuple[Any, ...]]] = {}
    try:
        for name, bootstrap in (("kafka", kafka4), ("raybroker", raybroker)):
            changed = features_tool(bootstrap, "downgrade", "--feature", f"{SHARE_VERSION}=0")
            assert changed == (0, [f"{SHARE_VERSION} was downgraded to 0."]), name
            off = until(functools.partial(share_group_answers, bootstrap), lambda answer: answer[0][0] != 0)
            restored = features_tool(bootstrap, "upgrade", "--feature", f"{SHARE_VERSION}={SHARE_VERSION_LEVEL}")
            assert restored == (0, [f"{SHARE_VERSION} was upgraded to {SHARE_VERSION_LEVEL}."]), name
            on = until(functools.partial(share_group_answers, bootstrap), lambda answer: answer[0][0] == 0)
            answers[name] = [off, on[0]]
    finally:
        for bootstrap in (kafka4, raybroker):
            features_tool(bootstrap, "upgrade", "--feature", f"{SHARE_VERSION}={SHARE_VERSION_LEVEL}")
    assert answers["raybroker"] == answers["kafka"]
    assert {answer[0] for answer in answers["kafka"][0]} == {35}
    assert answers["kafka"][1][:2] == (0, 1)


def until(answered: Any, wanted: Any) -> Any:
    """`answered()` once `wanted` holds of it (Kafka's brokers learn a feature change from the metadata log)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = answered()
        if wanted(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


def share_group_answers(bootstrap: str) -> tuple[tuple[Any, ...], ...]:
    """A new member's heartbeat into a new share group, then each other share-group API about that group: (code,
    epoch or message) of each; the member leaves if it joined."""
    group = f"sv-{uuid.uuid4().hex[:8]}"
    member = uuid.uuid4().hex[:22]
    with coordinator_client(bootstrap, group, GROUP_KEY, DEADLINE_S) as client:
        join = {"group_id": group, "member_id": member, "member_epoch": 0, "subscribed_topic_names": [f"{group}-x"]}
        joined = client.request(76, 1, join)
        (described,) = client.request(77, 1, {"group_ids": [group], "include_authorized_operations": False}).groups
        session = {"group_id": group, "member_id": member, "share_session_epoch": 0, "topics": []}
        fetch = {
            **session,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 100,
            "batch_size": 100,
            "forgotten_topics_data": [],
        }
        fetched = client.request(78, 2, fetch)
        acknowledged = client.request(79, 2, {**session, "share_session_epoch": 1, "is_renew_ack": False})
        (offsets,) = client.request(90, 1, {"groups": [{"group_id": group, "topics": None}]}).groups
        altered = client.request(91, 0, {"group_id": group, "topics": []})
        deleted = client.request(92, 0, {"group_id": group, "topics": []})
        if joined.error_code == 0:
            client.request(76, 1, {**join, "member_epoch": -1, "subscribed_topic_names": None})
    return (
        (int(joined.error_code), joined.member_epoch if joined.error_code == 0 else joined.error_message),
        (int(described.error_code), described.error_message),
        (int(fetched.error_code), fetched.error_message),
        (int(acknowledged.error_code), acknowledged.error_message),
        (int(offsets.error_code), offsets.error_message),
        (int(altered.error_code), altered.error_message),
        (int(deleted.error_code), deleted.error_message),
    )
