"""The cluster's ACL bindings, as the controller keeps them: in memory, and as records of its metadata log.

One record per resource pattern holds every binding of that pattern, in the order they were created:

    key    acl/<resource type>/<pattern type>/<resource name>      e.g. acl/TOPIC/PREFIXED/orders-
    value  {"acls": [{"principal": "User:alice", "host": "*", "operation": "READ", "permission_type": "ALLOW"}]}

(enum names, not codes, so `raybroker dump-log --print-data-log` reads plainly); the key's name is everything
after the third `/`, so names holding `/` survive. A pattern whose last binding is deleted gets a null value
(a tombstone), so compaction drops it. The store is given the function that appends a record and returns its
offset; it writes before it changes its memory, so what it answers is always on disk.

`version` is the offset after the last ACL record written or replayed: it moves with every change and never
goes back while the log holds that record, so a listener that polls it rebuilds its `Authorizer` only when the
ACLs changed, even across a controller restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from actors.core.security.acl_bindings import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
)

ACL_KEY_PREFIX = "acl/"
# Appends one record of the metadata log (key, JSON value or None for a tombstone) and returns its offset.
WriteRecord = Callable[[str, dict[str, Any] | None], int]
Pattern = tuple[ResourceType, PatternType, str]


def acl_key(pattern: Pattern) -> str:
    resource_type, pattern_type, resource_name = pattern
    return f"{ACL_KEY_PREFIX}{resource_type.name}/{pattern_type.name}/{resource_name}"


def parse_acl_key(key: str) -> Pattern:
    """The (resource type, pattern type, name) of an `acl/...` key; `InvalidAclError` if it is not one."""
    parts = key.split("/", 3)
    if len(parts) != 4 or parts[0] + "/" != ACL_KEY_PREFIX:
        raise InvalidAclError(f"not an ACL record key: {key!r}")
    return ResourceType.parse(parts[1]), PatternType.parse(parts[2]), parts[3]


class AclStore:
    """Every ACL binding of the cluster; see the module docstring. Not thread-safe: the controller's lock
    serialises its calls."""

    def __init__(self, write: WriteRecord) -> None:
        self._write = write
        self._patterns: dict[Pattern, tuple[AclBinding, ...]] = {}
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def load(self, key: str, value: Mapping[str, Any] | None, offset: int) -> None:
        """Replays the latest record of `key` (an `acl/...` key; None for a tombstone), found at `offset`."""
        pattern = parse_acl_key(key)
        self._version = max(self._version, offset + 1)
        if value is None:
            self._patterns.pop(pattern, None)
            return
        self._patterns[pattern] = tuple(_binding(pattern, entry) for entry in value["acls"])

    def bindings(self) -> list[AclBinding]:
        """Every binding, grouped by resource pattern, each pattern's in the order they were created."""
        return [binding for bindings in self._patterns.values() for binding in bindings]

    def create(self, bindings: Iterable[AclBinding]) -> None:
        """Adds the bindings; one that already exists is left as it is (Kafka's CreateAcls is idempotent)."""
        additions: dict[Pattern, list[AclBinding]] = {}
        for binding in bindings:
            if not isinstance(binding, AclBinding):
                raise InvalidAclError(f"not an ACL binding: {binding!r}")
            pattern = (binding.resource_type, binding.pattern_type, binding.resource_name)
            added = additions.setdefault(pattern, [])
            if binding not in self._patterns.get(pattern, ()) and binding not in added:
                added.append(binding)
        for pattern, added in additions.items():
            if added:
                self._replace(pattern, (*self._patterns.get(pattern, ()), *added))

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Deletes every binding any filter matches; per filter, the bindings it matched (a binding two filters
        match is listed under both, as Kafka's DeleteAcls answers)."""
        filters = list(filters)
        for acl_filter in filters:
            if not isinstance(acl_filter, AclBindingFilter):
                raise InvalidAclError(f"not an ACL binding filter: {acl_filter!r}")
        current = self.bindings()
        matched = [[binding for binding in current if acl_filter.matches(binding)] for acl_filter in filters]
        doomed = {binding for bindings in matched for binding in bindings}
        for pattern, bindings in list(self._patterns.items()):
            kept = tuple(binding for binding in bindings if binding not in doomed)
            if len(kept) != len(bindings):
                self._replace(pattern, kept)
        return matched

    def _replace(self, pattern: Pattern, bindings: tuple[AclBinding, ...]) -> None:
        """Writes the pattern's record (a tombstone when no binding is left), then takes it into memory."""
        value = {"acls": [_entry(binding) for binding in bindings]} if bindings else None
        offset = self._write(acl_key(pattern), value)
        self._version = max(self._version, offset + 1)
        if bindings:
            self._patterns[pattern] = bindings
        else:
            self._patterns.pop(pattern, None)


def _entry(binding: AclBinding) -> dict[str, str]:
    return {
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation.name,
        "permission_type": binding.permission_type.name,
    }


def _binding(pattern: Pattern, entry: Mapping[str, str]) -> AclBinding:
    resource_type, pattern_type, resource_name = pattern
    return AclBinding(
        resource_type,
        resource_name,
        pattern_type,
        entry["principal"],
        entry["host"],
        AclOperation.parse(entry["operation"]),
        AclPermissionType.parse(entry["permission_type"]),
    )
