"""FindCoordinator, ListGroups, DescribeGroups and DeleteGroups without sockets, at every served version: the
listener is every group's coordinator, groups with members and groups with only offsets are listed and described
as Kafka does, and only an Empty group is deleted."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.handlers.find_coordinator import FIND_COORDINATOR_KEY, FindCoordinatorHandler
from cluster.protocol.handlers.group_admin import (
    DELETE_GROUPS_KEY,
    DESCRIBE_GROUPS_KEY,
    LIST_GROUPS_KEY,
    DeleteGroupsHandler,
    DescribeGroupsHandler,
    ListGroupsHandler,
)
from cluster.protocol.handlers.groups import JOIN_GROUP_KEY, SYNC_GROUP_KEY, JoinGroupHandler, SyncGroupHandler
from cluster.protocol.router import SERVED
from cluster.protocol.views.broker_view import BrokerEndpoint
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from tests.cluster.protocol.helpers import answer_async, commit_offsets, committed_offsets, run

ENDPOINT = BrokerEndpoint(3, "broker.example", 19092)


@pytest.fixture
def groups(groups_each_way: GroupView) -> GroupView:
    """This module's tests run over both ways to the group coordinator (`groups_each_way`)."""
    return groups_each_way


def versions(key: int) -> range:
    return range(SERVED[key].min_version, SERVED[key].max_version + 1)


def stable_group(groups: GroupView, group: str) -> str:
    """A group with one member, Stable: its member id."""
    values = {
        "group_id": group,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "roundrobin", "metadata": b"subscription"}],
    }
    member = run(answer_async(JoinGroupHandler(groups), JOIN_GROUP_KEY, 3, values)).member_id
    sync = {
        "group_id": group,
        "generation_id": 1,
        "member_id": member,
        "assignments": [{"member_id": member, "assignment": b"plan"}],
    }
    assert run(answer_async(SyncGroupHandler(groups), SYNC_GROUP_KEY, 2, sync)).error_code == ErrorCode.none
    return member


@pytest.mark.parametrize("version", versions(FIND_COORDINATOR_KEY))
def test_this_listener_coordinates_every_group(version: int) -> None:
    handler = FindCoordinatorHandler(ENDPOINT)
    values: dict[str, Any] = {"key": "g1", "key_type": 0, "coordinator_keys": ["g1", "g2"]}
    answer = run(answer_async(handler, FIND_COORDINATOR_KEY, version, values))
    found = answer.coordinators if version >= 4 else [answer]
    assert [(c.error_code, c.node_id, c.host, c.port) for c in found] == [
        (ErrorCode.none, 3, "broker.example", 19092)
    ] * len(found)
    if version >= 1:
        transactional = run(answer_async(handler, FIND_COORDINATOR_KEY, version, {**values, "key_type": 1}))
        found = transactional.coordinators if version >= 4 else [transactional]
        assert [(c.error_code, c.node_id) for c in found] == [(ErrorCode.none, 3)] * len(found)
        share = run(answer_async(handler, FIND_COORDINATOR_KEY, version, {**values, "key_type": 2}))
        assert {c.error_code for c in (share.coordinators if version >= 4 else [share])} == {ErrorCode.invalid_request}


@pytest.mark.parametrize("version", versions(LIST_GROUPS_KEY))
def test_groups_with_members_and_groups_with_only_offsets_are_listed(
    version: int, broker: InProcessBroker, groups: GroupView
) -> None:
    stable_group(groups, "active")
    commit_offsets(broker, {("offsets-only", "t", 0): 5})
    answer = run(
        answer_async(ListGroupsHandler(groups), LIST_GROUPS_KEY, version, {"states_filter": [], "types_filter": []})
    )
    listed = {g.group_id: g for g in answer.groups}
    assert (answer.error_code, sorted(listed)) == (ErrorCode.none, ["active", "offsets-only"])
    assert (listed["active"].protocol_type, listed["offsets-only"].protocol_type) == ("consumer", "")
    if version >= 4:
        assert (listed["active"].group_state, listed["offsets-only"].group_state) == ("Stable", "Empty")
        filtered = run(
            answer_async(
                ListGroupsHandler(groups), LIST_GROUPS_KEY, version, {"states_filter": ["empty"], "types_filter": []}
            )
        )
        assert [g.group_id for g in filtered.groups] == ["offsets-only"]
    if version >= 5:
        assert {g.group_type for g in answer.groups} == {"classic"}
        none = run(
            answer_async(
                ListGroupsHandler(groups), LIST_GROUPS_KEY, version, {"states_filter": [], "types_filter": ["consumer"]}
            )
        )
        assert none.groups == ()


@pytest.mark.parametrize("version", versions(DESCRIBE_GROUPS_KEY))
def test_describe_shows_members_with_their_assignment_and_unknown_groups_as_kafka(
    version: int, groups: GroupView
) -> None:
    member = stable_group(groups, "active")
    values = {"groups": ["active", "missing"], "include_authorized_operations": False}
    active, missing = run(answer_async(DescribeGroupsHandler(groups), DESCRIBE_GROUPS_KEY, version, values)).groups
    assert (active.error_code, active.group_state, active.protocol_type, active.protocol_data) == (
        ErrorCode.none,
        "Stable",
        "consumer",
        "roundrobin",
    )
    assert [(m.member_id, m.client_id, m.member_metadata, m.member_assignment) for m in active.members] == [
        (member, "test", b"subscription", b"plan")
    ]
    expected = (ErrorCode.group_id_not_found if version >= 6 else ErrorCode.none, "Dead")
    assert (missing.error_code, missing.group_state) == expected


@pytest.mark.parametrize("version", versions(DELETE_GROUPS_KEY))
def test_only_empty_groups_are_deleted_with_their_offsets(
    version: int, broker: InProcessBroker, groups: GroupView, view: InProcessBrokerView
) -> None:
    stable_group(groups, "active")
    commit_offsets(broker, {("offsets-only", "t", 0): 5})
    values = {"groups_names": ["active", "offsets-only", "missing"]}
    answer = run(answer_async(DeleteGroupsHandler(groups, view), DELETE_GROUPS_KEY, version, values))
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("active", ErrorCode.non_empty_group),
        ("offsets-only", ErrorCode.none),
        ("missing", ErrorCode.group_id_not_found),
    ]
    assert committed_offsets(broker) == {}
