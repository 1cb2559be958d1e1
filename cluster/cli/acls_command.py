"""`raybroker acls`, modelled on kafka-acls.sh: `--add`, `--remove`, `--list` ACL bindings.

The options read as kafka-acls.sh reads them (`cluster.cli.acl_options`); the output is its layout: for each
resource pattern a line ``Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders,
patternType=LITERAL)`: `` then one tab-indented line per entry, ``(principal=User:alice, host=*, operation=READ,
permissionType=ALLOW)``, then a blank line. `--remove` asks no confirmation (`--force` is accepted, for scripts
written for kafka-acls.sh).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import EXIT_OK, add_command, connect_admin

if TYPE_CHECKING:
    from actors.core.security.acl_bindings import AclBinding


def add_commands(subcommands: Any) -> None:
    acls = add_command(
        subcommands,
        "acls",
        "add, remove and list ACLs like kafka-acls.sh",
        "Manage ACLs, like kafka-acls.sh. Resources: --topic, --group, --transactional-id (each may be repeated) "
        "and --cluster, under --resource-pattern-type (literal or prefixed; any or match select for --list and "
        "--remove). Entries: each --allow-principal/--deny-principal (User:NAME) with each --operation (default "
        "All) and each --allow-host/--deny-host (default *). --producer and --consumer add the operations a "
        "producer or consumer needs. --list prints kafka-acls.sh's layout.",
    )
    actions = acls.add_mutually_exclusive_group(required=True)
    for action, text in (
        ("add", "add the entries to every resource named"),
        ("remove", "remove the entries (all of them, without any principal) from every resource filter named"),
        ("list", "list the ACLs of the resources named, or all ACLs"),
    ):
        actions.add_argument(f"--{action}", dest="action", action="store_const", const=action, help=text)
    for option, metavar, text in (
        ("--allow-principal", "P", "a principal, Type:name (User:alice, User:*), the entries allow"),
        ("--deny-principal", "P", "a principal the entries deny"),
        ("--allow-host", "H", "an IP address the allow entries apply to (default *)"),
        ("--deny-host", "H", "an IP address the deny entries apply to (default *)"),
        (
            "--operation",
            "OP",
            "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
            "AlterConfigs, IdempotentWrite or All (default All)",
        ),
        ("--topic", "T", "a topic (a prefix with --resource-pattern-type prefixed; * for every topic)"),
        ("--group", "G", "a consumer group"),
        ("--transactional-id", "ID", "a transactional id"),
        ("--principal", "P", "--list: only the entries of this principal"),
    ):
        acls.add_argument(option, action="append", metavar=metavar, help=f"{text} (may be repeated)")
    acls.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    acls.add_argument(
        "--resource-pattern-type",
        metavar="TYPE",
        help="literal, prefixed, any or match (default: literal for --add and --remove, any for --list)",
    )
    acls.add_argument("--producer", action="store_true", help="Write, Describe, Create on --topic (and more)")
    acls.add_argument("--consumer", action="store_true", help="Read, Describe on --topic and Read on --group")
    acls.add_argument("--idempotent", action="store_true", help="--producer: IdempotentWrite on the cluster too")
    acls.add_argument("--force", action="store_true", help="--remove: do not ask (raybroker never asks)")
    acls.set_defaults(handler=run_acls)


def run_acls(args: argparse.Namespace) -> int:
    # The options' meaning needs the ACL model, whose package loads Ray: only once the command runs.
    from cluster.cli import acl_options

    acl_options.check_options(args)
    if args.action == "list":
        filters = acl_options.list_filters(args)
        principals = acl_options.list_principals(args)
        admin = connect_admin(args.address)
        found = [binding for acl_filter in filters for binding in admin.describe_acls(acl_filter)]
        if not principals:
            _print_grouped("Current ACLs for resource", found)
        for principal in principals:
            print(f"ACLs for principal `{principal}`")
            _print_grouped("Current ACLs for resource", [b for b in found if b.principal == principal])
        return EXIT_OK
    plan = acl_options.resource_entries(args)
    if args.action == "add":
        to_add = {resource: acl_options.bindings(resource, planned) for resource, planned in plan.items()}
        admin = connect_admin(args.address)
        for created in to_add.values():
            _print_grouped("Adding ACLs for resource", created)
            admin.create_acls(created)
        return EXIT_OK
    filters = [
        acl_filter
        for resource, planned in plan.items()
        for acl_filter in acl_options.removal_filters(resource, planned)
    ]
    deleted = connect_admin(args.address).delete_acls(filters)
    _print_grouped("Removed ACLs for resource", [binding for bindings in deleted for binding in bindings])
    return EXIT_OK


def _print_grouped(title: str, bindings: Iterable[AclBinding]) -> None:
    """kafka-acls.sh's layout: per resource pattern a title line, its entries indented by a tab, a blank line."""
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for binding in bindings:
        key = (binding.resource_type.value, binding.resource_name, binding.pattern_type.value)
        if binding not in grouped.setdefault(key, []):
            grouped[key].append(binding)
    for key in sorted(grouped):
        entries = grouped[key]
        print(f"{title} `{entries[0].pattern_text()}`: ")
        for binding in entries:
            print(f"\t{binding.entry_text()}")
        print()
