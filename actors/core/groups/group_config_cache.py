"""The group coordinator's copy of groups' own configs (the GROUP config resource, `storage.config.group_config`),
which the controller keeps (`actors.core.controller.group_config_store`): loaded whole when the coordinator starts,
then each change as the controller tells it, keeping per group the newest by its version whatever order the news came
in. What the coordinator's groups read at each heartbeat (and a share group at each ShareFetch), so a change applies
from the next one, as Kafka's coordinator reads its `GroupConfigManager` then: a share group's `share.*` keys
(`share_config`, the isolation level and delivery count limit among them) and a consumer-protocol group's
`consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` (`consumer_timeouts`). Thread-safe: its own lock,
as the controller's news may come while a heartbeat holds the coordinator's membership lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from actors.core.controller.group_config_store import GroupConfigVersion
from actors.core.shares.group_share_config import LATEST, GroupShareConfig
from storage.config.group_config import ERRORS_DLQ_COPY_RECORD_ENABLE, ERRORS_DLQ_TOPIC_NAME, READ_UNCOMMITTED
from storage.config.group_protocol_config import GroupProtocolConfig


class GroupConfigCache:
    """Every group's own configs as last told by the controller; see the module docstring."""

    def __init__(self, loaded: Mapping[str, GroupConfigVersion], protocol: GroupProtocolConfig) -> None:
        self._lock = threading.Lock()
        self._groups = dict(loaded)
        self._protocol = protocol

    def update(self, group: str, configs: GroupConfigVersion) -> None:
        """The controller's news of the group's configs; ignored if older than the version held."""
        with self._lock:
            held = self._groups.get(group)
            if held is None or held.version < configs.version:
                self._groups[group] = configs

    def configs(self, group: str) -> dict[str, str]:
        """The keys the group sets."""
        with self._lock:
            held = self._groups.get(group)
            return {} if held is None else dict(held.configs)

    def share_config(self, group: str) -> GroupShareConfig:
        """The share group's own settings (`ShareGroups`' seam), from its `share.*` keys."""
        configs = self.configs(group)

        def number(name: str) -> int | None:
            return None if name not in configs else int(configs[name])

        return GroupShareConfig(
            share_record_lock_duration_ms=number("share.record.lock.duration.ms"),
            share_session_timeout_ms=number("share.session.timeout.ms"),
            share_heartbeat_interval_ms=number("share.heartbeat.interval.ms"),
            share_auto_offset_reset=configs.get("share.auto.offset.reset", LATEST),
            share_isolation_level=configs.get("share.isolation.level", READ_UNCOMMITTED),
            share_delivery_count_limit=number("share.delivery.count.limit"),
            errors_deadletterqueue_topic_name=configs.get(ERRORS_DLQ_TOPIC_NAME, ""),
            errors_deadletterqueue_copy_record_enable=configs.get(ERRORS_DLQ_COPY_RECORD_ENABLE) == "true",
        )

    def consumer_timeouts(self, group: str) -> tuple[int, int]:
        """The consumer-protocol group's session timeout and heartbeat interval (`ConsumerGroups`' seam): its own
        `consumer.*` keys, else the broker's."""
        configs = self.configs(group)
        session = configs.get("consumer.session.timeout.ms", self._protocol.group_consumer_session_timeout_ms)
        heartbeat = configs.get("consumer.heartbeat.interval.ms", self._protocol.group_consumer_heartbeat_interval_ms)
        return int(session), int(heartbeat)
