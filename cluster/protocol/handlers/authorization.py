"""The authorization questions the handlers ask, in one place, in the shapes Kafka's `AuthHelper` asks them.

Every handler that guards a resource is given the listener's `AccessControl` and asks before it touches the
resource, so a principal without DESCRIBE on a topic learns nothing of it, not even whether it exists: Kafka's
order, authorization first and existence second. A handler built without one (None: the tests of behaviour
other than authorization) allows everything, as a Kafka broker without `authorizer.class.name` does; so does an
`AccessControl` whose authorizer is unset, and each question is then answered without looking at any ACL.

What each API asks is in its handler's module; the resource it names is always LITERAL (the authorizer matches
it against LITERAL, `*` and PREFIXED bindings). `authorized_operations` fills the `*_authorized_operations`
fields of Metadata, DescribeGroups and DescribeCluster when a client asks for them: a bit per operation (bit n
for the operation whose wire code is n) the principal may do on the resource, among those that apply to its
type; Kafka's "not asked" value is `AUTHORIZED_OPERATIONS_OMITTED`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.security.access import AccessControl

# Kafka's "authorized operations not requested" sentinel (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

# The role of the broker a handler is written over: a `BrokerView`, `GroupView`, `TransactionView` or `SecurityView`.
View = TypeVar("View")


class GuardedHandler(Generic[View]):
    """What every guarded handler holds: the view of the role of the broker it is written over (`_view`) and the
    listener's `AccessControl` it asks first (`_access`; None allows everything, see the module docstring). A
    handler over a second role, or with settings of its own, calls this `__init__` and keeps the rest itself; the
    ACL handlers, which need an `AccessControl` to change, hold theirs themselves."""

    def __init__(self, view: View, access: AccessControl | None = None) -> None:
        self._view = view
        self._access = access


def allows(
    access: AccessControl | None,
    context: ConnectionContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """Whether the connection's principal may do `operation` on the named resource."""
    return access is None or access.allows(context, operation, resource_type, name)


def allows_cluster(access: AccessControl | None, context: ConnectionContext, operation: AclOperation) -> bool:
    """Whether the principal may do `operation` on the cluster resource (`kafka-cluster`)."""
    return allows(access, context, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def allows_any(
    access: AccessControl | None, context: ConnectionContext, operation: AclOperation, resource_type: ResourceType
) -> bool:
    """Whether the principal may do `operation` on some resource of the type (Kafka's `authorizeByResourceType`)."""
    return access is None or access.allows_any(context, operation, resource_type)


def authorized_names(
    access: AccessControl | None,
    context: ConnectionContext,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> set[str]:
    """The names among `names` the principal may do `operation` on, each asked once however often it appears
    (Kafka's `filterByAuthorized`: a Produce names a topic once per partition)."""
    distinct = set(names)
    if access is None or not access.enabled:
        return distinct
    return {name for name in distinct if access.allows(context, operation, resource_type, name)}


def authorized_operations(
    access: AccessControl | None, context: ConnectionContext, resource_type: ResourceType, name: str
) -> int:
    """The operations the principal may do on the resource, as Kafka's 32-bit field (see the module docstring)."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if allows(access, context, operation, resource_type, name):
            bits |= 1 << operation
    return bits


def cluster_authorized_operations(access: AccessControl | None, context: ConnectionContext, asked: bool) -> int:
    """The `cluster_authorized_operations` of DescribeCluster and Metadata (v8-10): omitted unless `asked`, 0 unless
    the principal may DESCRIBE the cluster, else what it may do on the cluster."""
    if not asked:
        return AUTHORIZED_OPERATIONS_OMITTED
    if not allows_cluster(access, context, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(access, context, ResourceType.CLUSTER, CLUSTER_NAME)


def add_group_operations(
    access: AccessControl | None, context: ConnectionContext, described: Iterable[dict[str, Any]]
) -> None:
    """Sets `authorized_operations` in each described group answered without error: what DescribeGroups,
    ConsumerGroupDescribe and ShareGroupDescribe fill when asked."""
    for group in described:
        if group["error_code"] == ErrorCode.none:
            group["authorized_operations"] = authorized_operations(
                access, context, ResourceType.GROUP, group["group_id"]
            )
