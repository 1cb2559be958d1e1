"""Kafka's StandardAuthorizer decision over a fixed set of ACL bindings: may a principal, from a host, do an
operation on a resource?

The rules, in order:

1. A super user (`super.users`, e.g. `User:admin`) may do anything.
2. The bindings that apply to a resource are the LITERAL ones of its name, the LITERAL `*` of its type, and the
   PREFIXED ones whose name starts its name. If there are none at all (whoever they name), the answer is
   `allow.everyone.if.no.acl.found`.
3. Of those, a binding concerns the request if its principal is the caller's or `User:*` and its host the
   caller's or `*`. A DENY binding for the operation or ALL refuses, whatever allows. Otherwise an ALLOW binding
   for the operation or ALL grants; so does one that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE,
   ALTER_CONFIGS implies DESCRIBE_CONFIGS (a DENY implies nothing).
4. Else the request is refused.

`authorize` runs per request and per topic, so the bindings are indexed once: LITERAL ones by (type, name), and
PREFIXED ones by (type, prefix) beside the set of prefix lengths in use, so a check costs one dictionary lookup
per prefix length in use, not a scan of every binding. An `Authorizer` is immutable: a changed ACL set means a
new one (the listener rebuilds it when the controller's ACL version moves).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable

from actors.core.security.acl_bindings import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
)

IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
# The resource name Kafka's `authorizeByResourceType` asks about first: super users are allowed whatever the DENY
# bindings say, and anyone is under allow.everyone.if.no.acl.found when no binding applies to that name.
_PROBE_NAME = "hardcode"


class Authorizer:
    """Answers authorization questions over one set of bindings; see the module docstring."""

    def __init__(
        self, bindings: Iterable[AclBinding], super_users: Collection[str], allow_everyone_if_no_acl_found: bool
    ) -> None:
        self._super_users = frozenset(super_users)
        self._allow_everyone = bool(allow_everyone_if_no_acl_found)
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        self._prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        self._prefix_lengths: dict[ResourceType, list[int]] = defaultdict(list)
        self._by_type: dict[ResourceType, list[AclBinding]] = defaultdict(list)
        for binding in bindings:
            key = (binding.resource_type, binding.resource_name)
            if binding.pattern_type is PatternType.LITERAL:
                self._literal[key].append(binding)
            else:
                self._prefixed[key].append(binding)
            self._by_type[binding.resource_type].append(binding)
        lengths: dict[ResourceType, set[int]] = defaultdict(set)
        for resource_type, prefix in self._prefixed:
            lengths[resource_type].add(len(prefix))
        for resource_type, found in lengths.items():
            self._prefix_lengths[resource_type] = sorted(found)

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, resource_name: str
    ) -> bool:
        """Whether `principal` from `host` may do `operation` on the resource (Kafka's `authorize` for one
        literal resource)."""
        if principal in self._super_users:
            return True
        applicable = self._applicable(resource_type, resource_name)
        if not applicable:
            return self._allow_everyone
        allowed = False
        for binding in applicable:
            if binding.principal not in (principal, WILDCARD_PRINCIPAL) or binding.host not in (host, WILDCARD):
                continue
            if binding.permission_type is AclPermissionType.DENY:
                if binding.operation in (operation, AclOperation.ALL):
                    return False
            elif not allowed:
                allowed = _allow_grants(binding.operation, operation)
        return allowed

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether `principal` from `host` may do `operation` on at least one resource of `resource_type`
        (Kafka's `Authorizer.authorizeByResourceType`, e.g. for an idempotent producer without IDEMPOTENT_WRITE on
        the cluster but with WRITE on some topic).

        Allowed if the probe resource `hardcode` is allowed (a super user; no ACL applying to it under
        allow.everyone.if.no.acl.found); else, of the caller's bindings for exactly the operation or ALL: a
        LITERAL `*` DENY refuses; a LITERAL `*` ALLOW allows; else an ALLOW on a name allows unless a DENY on the
        same LITERAL name, or a PREFIXED DENY on a prefix of it, dominates it. No implied operations here, as in
        Kafka."""
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or operation in (
            AclOperation.ANY,
            AclOperation.UNKNOWN,
        ):
            raise InvalidAclError(
                f"authorize_by_resource_type needs a concrete type and operation, not "
                f"{resource_type.name} and {operation.name}"
            )
        if self.authorize(principal, host, operation, resource_type, _PROBE_NAME):
            return True
        denied: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allowed: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        wildcard_allowed = False
        for binding in self._by_type.get(resource_type, ()):
            if binding.principal not in (principal, WILDCARD_PRINCIPAL) or binding.host not in (host, WILDCARD):
                continue
            if binding.operation not in (operation, AclOperation.ALL):
                continue
            wildcard = binding.pattern_type is PatternType.LITERAL and binding.resource_name == WILDCARD
            if binding.permission_type is AclPermissionType.DENY:
                if wildcard:
                    return False
                denied[binding.pattern_type].add(binding.resource_name)
            elif wildcard:
                wildcard_allowed = True
            else:
                allowed[binding.pattern_type].add(binding.resource_name)
        if wildcard_allowed:
            return True
        for pattern_type, names in allowed.items():
            for name in names:
                if pattern_type is PatternType.LITERAL and name in denied[PatternType.LITERAL]:
                    continue
                if not any(name[:length] in denied[PatternType.PREFIXED] for length in range(1, len(name) + 1)):
                    return True
        return False

    def _applicable(self, resource_type: ResourceType, resource_name: str) -> list[AclBinding]:
        """The bindings that apply to the resource, whatever their principal, host and operation."""
        found = list(self._literal.get((resource_type, resource_name), ()))
        if resource_name != WILDCARD:
            found.extend(self._literal.get((resource_type, WILDCARD), ()))
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(resource_name):
                break
            found.extend(self._prefixed.get((resource_type, resource_name[:length]), ()))
        return found


def _allow_grants(granted: AclOperation, wanted: AclOperation) -> bool:
    """Whether an ALLOW binding for `granted` allows `wanted` (ALL, the same, or an implied operation)."""
    if granted is AclOperation.ALL or granted is wanted:
        return True
    if wanted is AclOperation.DESCRIBE:
        return granted in IMPLIES_DESCRIBE
    if wanted is AclOperation.DESCRIBE_CONFIGS:
        return granted in IMPLIES_DESCRIBE_CONFIGS
    return False
