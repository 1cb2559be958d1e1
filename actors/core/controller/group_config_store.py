"""Groups' own configs as the controller keeps them (Kafka's `ConfigurationControlManager` for GROUP resources):
what `kafka-configs.sh --alter --entity-type groups --entity-name G` sets, checked by
`storage.config.group_config.validate` against the broker's group bounds.

Records of the metadata log, one per group holding every key it sets:

    key    group-config/<group id>
    value  {"configs": {key: value, ...}}                        (a tombstone once no key is left)

A group's version is the offset of the record that wrote its configs; it only grows, so the group coordinator, told
of each change (and loading every group's at its start), keeps the newest whichever order the news arrives in. A
group's configs exist whether or not the group does, as in Kafka; the group id "" (Kafka's default resource) is
refused with INVALID_REQUEST. `listed` are the groups ListConfigResources names, as Kafka's `GroupConfigManager`
knows them: every group with configs, and every group written since the controller started (one whose keys were all
deleted too, until a restart). The store writes before it changes its memory, so what it answers is always on disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from actors.core.security.acl_store import WriteRecord
from storage.config.group_config import defaults, validate
from storage.config.group_protocol_config import GroupProtocolConfig
from storage.config.share_group_config import ShareGroupConfig
from storage.errors import InvalidRequestError

GROUP_CONFIG_KEY_PREFIX = "group-config/"


@dataclass(frozen=True, slots=True)
class GroupConfigVersion:
    """One group's overrides and the metadata log offset that wrote them (0 with none ever written)."""

    version: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)


class GroupConfigStore:
    """Every group's own configs; see the module docstring. Not thread-safe: the controller's lock serialises its
    calls."""

    def __init__(self, write: WriteRecord, protocol: GroupProtocolConfig, share: ShareGroupConfig) -> None:
        self._write = write
        self._protocol = protocol
        self._share = share
        self._groups: dict[str, GroupConfigVersion] = {}
        self._written: set[str] = set()

    def load(self, key: str, value: Mapping[str, object] | None, offset: int) -> None:
        """Replays the latest record of `key` (a `group-config/...` key; None for a tombstone) written at `offset`."""
        group = key[len(GROUP_CONFIG_KEY_PREFIX) :]
        configs = {} if value is None else value.get("configs", {})
        if isinstance(configs, Mapping) and configs:
            self._groups[group] = GroupConfigVersion(offset, {str(k): str(v) for k, v in configs.items()})
        else:
            self._groups.pop(group, None)

    def set(self, group: str, configs: Mapping[str, str], validate_only: bool = False) -> GroupConfigVersion | None:
        """Replaces the group's overrides with `configs`, checked first (`InvalidConfigError` with Kafka's message;
        INVALID_REQUEST for the group ""). Returns what was written, None when nothing was (`validate_only`, or
        the same overrides again)."""
        if not group:
            raise InvalidRequestError("Default group resources are not allowed.")
        checked = validate(configs, self._protocol, self._share)
        if validate_only or checked == self.configs(group):
            return None
        offset = self._write(GROUP_CONFIG_KEY_PREFIX + group, {"configs": checked} if checked else None)
        written = GroupConfigVersion(offset, checked)
        self._written.add(group)
        if checked:
            self._groups[group] = written
        else:
            self._groups.pop(group, None)
        return written

    def configs(self, group: str) -> dict[str, str]:
        """The keys the group sets."""
        found = self._groups.get(group)
        return {} if found is None else dict(found.configs)

    def defaults(self) -> dict[str, str]:
        """Every group key's value for a group that sets none: the broker's."""
        return defaults(self._protocol, self._share)

    def listed(self) -> list[str]:
        """The groups ListConfigResources names (see the module docstring), sorted."""
        return sorted({*self._groups, *self._written})

    def every_group(self) -> dict[str, GroupConfigVersion]:
        """Every group that sets a key, with its version (the group coordinator loads them at its start)."""
        return dict(self._groups)
