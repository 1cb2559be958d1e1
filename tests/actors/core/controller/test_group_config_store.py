"""Groups' own configs as the controller keeps them (`actors.core.controller.group_config_store`), plain, no Ray: set,
replaced and deleted as a dict oracle says, kept across a controller's restart, refused values and validate_only
writing nothing, and each change told to the group coordinator's seam with a growing version."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.controller.group_config_store import GroupConfigVersion
from storage.clock import MockClock
from storage.errors import InvalidConfigError, InvalidRequestError
from tests.actors.core.controller.test_controller import NODES, Cluster

RESET = "share.auto.offset.reset"
LOCK = "share.record.lock.duration.ms"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path, MockClock())
    running.register(*NODES)
    try:
        yield running
    finally:
        running.close()


def test_a_groups_configs_are_replaced_deleted_and_survive_a_restart(cluster: Cluster) -> None:
    controller = cluster.controller
    defaults = controller.group_config("g")[1]
    assert controller.group_config("g") == ({}, defaults)
    assert defaults[RESET] == "latest" and defaults[LOCK] == "30000"
    controller.set_group_config("g", {RESET: "earliest", LOCK: "20000"})
    controller.set_group_config("other", {RESET: "earliest"})
    controller.set_group_config("other", {})
    assert controller.group_config("g")[0] == {RESET: "earliest", LOCK: "20000"}
    first = controller.group_configs()["g"].version
    controller.close()
    cluster.controller = restarted = cluster.start_controller()
    assert restarted.group_config("g")[0] == {RESET: "earliest", LOCK: "20000"}
    assert restarted.group_config("other")[0] == {}
    assert set(restarted.group_configs()) == {"g"} and restarted.group_configs()["g"].version == first
    # ListConfigResources names an emptied group until a restart, as Kafka's `GroupConfigManager` does.
    assert restarted.configured_groups() == ["g"]
    restarted.set_group_config("emptied", {RESET: "earliest"})
    restarted.set_group_config("emptied", {})
    assert restarted.configured_groups() == ["emptied", "g"]
    restarted.set_group_config("g", {LOCK: "40000"})
    assert restarted.group_configs()["g"] == GroupConfigVersion(restarted.group_configs()["g"].version, {LOCK: "40000"})
    assert restarted.group_configs()["g"].version > first


@pytest.mark.parametrize(
    ("group", "configs", "error"),
    [
        ("g", {LOCK: "500"}, InvalidConfigError),
        ("g", {"no.such": "1"}, InvalidConfigError),
        ("g", {RESET: "bogus"}, InvalidConfigError),
        ("", {RESET: "earliest"}, InvalidRequestError),
    ],
)
def test_refusals_and_validate_only_change_nothing(
    cluster: Cluster, group: str, configs: dict[str, str], error: type[Exception]
) -> None:
    controller = cluster.controller
    controller.set_group_config("g", {RESET: "earliest"})
    before = controller.group_configs()
    with pytest.raises(error):
        controller.set_group_config(group, configs)
    controller.set_group_config("g", {LOCK: "20000"}, validate_only=True)
    assert controller.group_configs() == before


def test_each_change_is_told_with_a_growing_version_and_a_repeat_is_not(tmp_path: Path) -> None:
    told: list[tuple[str, GroupConfigVersion]] = []
    running = Cluster(tmp_path, MockClock())
    running.controller.close()
    running.controller = running.start_controller(
        group_config_changed=lambda group, configs: told.append((group, configs))
    )
    try:
        running.controller.set_group_config("g", {RESET: "earliest"})
        running.controller.set_group_config("g", {RESET: "earliest"})
        running.controller.set_group_config("g", {RESET: "earliest"}, validate_only=True)
        running.controller.set_group_config("g", {})
        assert [(group, dict(configs.configs)) for group, configs in told] == [("g", {RESET: "earliest"}), ("g", {})]
        assert told[0][1].version < told[1][1].version
    finally:
        running.close()
