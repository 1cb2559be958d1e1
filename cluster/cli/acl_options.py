"""What the options of `raybroker acls` mean, read as kafka-acls.sh reads them: which resource patterns, which
entries (principal, host, operation, permission) on each, and the option combinations it refuses.

- Resources: each `--topic`, `--group` and `--transactional-id` with `--resource-pattern-type`; `--cluster` (and
  `--idempotent`) is the one LITERAL `kafka-cluster` pattern, left out under a PREFIXED pattern type as Kafka does.
- Entries: every `--allow-principal` x `--operation` x `--allow-host` (hosts default to `*`), likewise for deny;
  operations default to All. `--producer` means Write, Describe, Create on its topics, Write and Describe on its
  transactional ids, and IdempotentWrite on the cluster with `--idempotent`; `--consumer` means Read and Describe
  on its topics and Read on its groups.
- An operation a resource type does not have (Read on the cluster) is a usage error, as are the combinations
  kafka-acls.sh refuses.

Kept apart from `cluster.cli.acls_command` because it needs the ACL model (`actors.core.security.acl_bindings`), whose
package
loads Ray: the command module imports this one only when the command runs, so `raybroker --help` stays fast.
"""

from __future__ import annotations

import argparse

from actors.core.security.acl_bindings import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
    check_principal,
)
from cluster.cli.command_support import UsageError

# (resource type, name, pattern type): a resource pattern, or a resource filter under ANY or MATCH.
Resource = tuple[ResourceType, str, PatternType]
# (principal, host, operation, permission type)
Entry = tuple[str, str, AclOperation, AclPermissionType]

PRODUCER_TOPIC_OPERATIONS = (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)
PRODUCER_TRANSACTIONAL_ID_OPERATIONS = (AclOperation.WRITE, AclOperation.DESCRIBE)
CONSUMER_TOPIC_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE)


def check_options(args: argparse.Namespace) -> None:
    """The option combinations kafka-acls.sh refuses, as `UsageError`s."""
    entry_options = (args.allow_principal, args.deny_principal, args.allow_host, args.deny_host)
    if args.action == "list" and (args.producer or args.consumer or any(entry_options)):
        raise UsageError("--list takes no --producer, --consumer, --allow-* or --deny-* option")
    if (args.producer or args.consumer) and (args.operation or args.deny_principal or args.deny_host):
        raise UsageError("--producer and --consumer take no --operation, --deny-principal or --deny-host")
    if args.principal and args.action != "list":
        raise UsageError("--principal goes with --list")
    if args.producer and not args.topic:
        raise UsageError("with --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("--idempotent goes with --producer")
    if args.consumer and (
        not args.topic or not args.group or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise UsageError(
            "with --consumer you must specify a --topic and a --group, and no --cluster or --transactional-id"
        )


def pattern_type(args: argparse.Namespace) -> PatternType:
    """`--resource-pattern-type`, by default LITERAL for --add and --remove and ANY for --list."""
    if args.resource_pattern_type is None:
        return PatternType.ANY if args.action == "list" else PatternType.LITERAL
    try:
        chosen = PatternType.parse(args.resource_pattern_type)
    except InvalidAclError as exc:
        raise UsageError(f"--resource-pattern-type: {exc}") from None
    if args.action == "add" and chosen not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(f"a --resource-pattern-type of {args.resource_pattern_type!r} is not valid when adding ACLs")
    return chosen


def resources(args: argparse.Namespace) -> list[Resource]:
    """The resource patterns (filters, for --list and --remove) the options name, in order, without repeats."""
    chosen = pattern_type(args)
    found: dict[Resource, None] = {}
    for name in args.topic or ():
        found[(ResourceType.TOPIC, name.strip(), chosen)] = None
    if (args.cluster or args.idempotent) and chosen is not PatternType.PREFIXED:
        found[(ResourceType.CLUSTER, CLUSTER_NAME, chosen)] = None
    for name in args.group or ():
        found[(ResourceType.GROUP, name.strip(), chosen)] = None
    for name in args.transactional_id or ():
        found[(ResourceType.TRANSACTIONAL_ID, name, chosen)] = None
    for resource_type, name, _ in found:
        if not name:
            raise UsageError(f"an empty {resource_type.pascal_name} name")
    return list(found)


def resource_entries(args: argparse.Namespace) -> dict[Resource, list[Entry]]:
    """For --add and --remove: each resource the options name and the entries to add or remove on it (none on
    --remove means every entry of the resource)."""
    named = resources(args)
    if not named:
        raise UsageError(
            "you must provide at least one resource: --topic T, --cluster, --group G or --transactional-id"
        )
    plan: dict[Resource, list[Entry]] = {}
    if not args.producer and not args.consumer:
        chosen = tuple(_operation(text) for text in args.operation or ("All",))
        for resource in named:
            plan[resource] = entries(args, chosen)
    if args.producer:
        for resource in named:
            if resource[0] is ResourceType.TOPIC:
                plan[resource] = entries(args, PRODUCER_TOPIC_OPERATIONS)
            elif resource[0] is ResourceType.TRANSACTIONAL_ID:
                plan[resource] = entries(args, PRODUCER_TRANSACTIONAL_ID_OPERATIONS)
            elif resource[0] is ResourceType.CLUSTER and args.idempotent:
                plan[resource] = entries(args, (AclOperation.IDEMPOTENT_WRITE,))
    if args.consumer:
        for resource in named:
            operations: tuple[AclOperation, ...]
            if resource[0] is ResourceType.TOPIC:
                operations = CONSUMER_TOPIC_OPERATIONS
            elif resource[0] is ResourceType.GROUP:
                operations = (AclOperation.READ,)
            else:
                continue
            plan[resource] = list(dict.fromkeys([*plan.get(resource, []), *entries(args, operations)]))
    for (resource_type, _, _), planned in plan.items():
        allowed = SUPPORTED_OPERATIONS[resource_type] | {AclOperation.ALL}
        if any(operation not in allowed for _, _, operation, _ in planned):
            names = ", ".join(sorted(operation.pascal_name for operation in allowed))
            raise UsageError(f"resource type {resource_type.pascal_name} only supports operations {names}")
    if args.action == "add" and any(not planned for planned in plan.values()):
        raise UsageError("you must specify --allow-principal or --deny-principal when adding ACLs")
    return plan


def entries(args: argparse.Namespace, operations: tuple[AclOperation, ...]) -> list[Entry]:
    """Every principal x operation x host of the allow options, then of the deny options."""
    found: dict[Entry, None] = {}
    for permission, principals, hosts in (
        (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
        (AclPermissionType.DENY, args.deny_principal, args.deny_host),
    ):
        for principal in principals or ():
            for operation in operations:
                for host in hosts or ("*",):
                    found[(_principal(principal), host.strip(), operation, permission)] = None
    return list(found)


def bindings(resource: Resource, planned: list[Entry]) -> list[AclBinding]:
    resource_type, name, pattern = resource
    try:
        return [AclBinding(resource_type, name, pattern, *entry) for entry in planned]
    except InvalidAclError as exc:
        raise UsageError(str(exc)) from None


def removal_filters(resource: Resource, planned: list[Entry]) -> list[AclBindingFilter]:
    """The filters --remove deletes with: the planned entries, or every entry of the resource when none."""
    resource_type, name, pattern = resource
    if not planned:
        return [resource_filter(resource)]
    return [AclBindingFilter(resource_type, name, pattern, *entry) for entry in planned]


def resource_filter(resource: Resource) -> AclBindingFilter:
    """Every binding of the resource (pattern), whoever it names."""
    resource_type, name, pattern = resource
    return AclBindingFilter(resource_type, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)


def list_filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    """The filters of --list: every binding of each resource named, or every binding when none is."""
    return [resource_filter(resource) for resource in resources(args)] or [AclBindingFilter.ANY]


def list_principals(args: argparse.Namespace) -> list[str]:
    """The `--principal` values of --list."""
    return list(dict.fromkeys(_principal(principal) for principal in args.principal or ()))


def _principal(text: str) -> str:
    try:
        return check_principal(text.strip())
    except InvalidAclError as exc:
        raise UsageError(str(exc)) from None


def _operation(text: str) -> AclOperation:
    try:
        operation = AclOperation.parse(text)
    except InvalidAclError as exc:
        raise UsageError(f"--operation: {exc}") from None
    if operation is AclOperation.ANY:
        raise UsageError("--operation Any is a filter, not an operation")
    return operation
