"""The `raybroker` command line (console entry point `raybroker = cluster.cli.main:main`).

Subcommands:

| command                | module                      | modelled on                                        |
|------------------------|-----------------------------|----------------------------------------------------|
| `dump-log`             | `cluster.cli.dump_log_command`      | kafka-dump-log.sh (offline, no Ray)                |
| `demo`, `storage-demo` | `cluster.cli.demos`         | -                                                  |
| `start`, `stop`,       | `cluster.cli.lifecycle`     | kafka-server-start.sh, kafka-server-stop.sh        |
| `auth-token`           |                             | `ray get-auth-token --generate`, owner-only        |
| `topics`               | `cluster.cli.topics_command`        | kafka-topics.sh                                    |
| `produce`              | `cluster.cli.produce_command`       | kafka-console-producer.sh                          |
| `consume`              | `cluster.cli.consume`       | kafka-console-consumer.sh                          |
| `get-offsets`,         | `cluster.cli.offsets`       | kafka-get-offsets.sh, kafka-delete-records.sh      |
| `delete-records`       |                             |                                                    |
| `consumer-groups`      | `cluster.cli.consumer_groups_command` | kafka-consumer-groups.sh                         |
| `share-groups`         | `cluster.cli.share_groups_command` | kafka-share-groups.sh                     |
| `iceberg`              | `cluster.cli.iceberg_command` | - (topics kept as Iceberg tables)                |
| `status`               | `cluster.cli.status`        | kafka-topics.sh --under-replicated-partitions,     |
|                        |                             | kafka-metadata-quorum.sh, kafka-consumer-groups.sh |
|                        |                             | on one screen; exit 1: a partition is offline      |
| `drain`, `balance`     | `cluster.cli.balancer`      | Cruise Control's remove_broker, rebalance          |
| `reassign`             | `cluster.cli.reassign_command` | kafka-reassign-partitions.sh                    |
| `transactions`         | `cluster.cli.transactions_command`  | kafka-transactions.sh (--list, --describe)         |
| `sql`                  | `cluster.cli.sql_command`   | Spark SQL over live topics, each one a view        |
| `stream`               | `cluster.cli.stream_command` | Spark Structured Streaming SQL over live topics   |
| `users`                | `cluster.cli.users`         | kafka-configs.sh --entity-type users (SCRAM)       |
| `acls`                 | `cluster.cli.acls_command`          | kafka-acls.sh                                      |

Each command module adds its parsers (`add_commands`) and holds its handlers; every handler is stored in the
parsed arguments as `handler`. Ray and Spark are imported only when a command that needs them runs, so
`dump-log` and `--help` never pay for them.

Exit codes:

    0    success
    1    data or broker error: a file is corrupt, truncated or unreadable (dump-log still prints what it
         could decode); no Ray cluster or no broker running; an unknown topic or partition, an invalid topic
         name or config, or any other request the broker refuses; `status` found a partition offline
         (also: an unexpected internal error, or stdout closed early as in `dump-log x.log | head`)
    2    usage error: bad arguments, options a command does not take together, a missing file, or a file
         kind dump-log does not read
    130  interrupted (Ctrl-C)

With several files, each is dumped in turn and the exit code is the highest one met. Errors are one line on
stderr, `raybroker: error: <message>` (only the first line of a longer message), never a traceback;
argparse's own usage errors keep its two-line form (usage, then the error) and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from cluster.cli import (
    acls_command,
    balancer,
    consume,
    consumer_groups_command,
    demos,
    dump_log_command,
    iceberg_command,
    lifecycle,
    offsets,
    produce_command,
    reassign_command,
    share_groups_command,
    sql_command,
    status,
    stream_command,
    topics_command,
    transactions_command,
    users,
)
from cluster.cli.command_support import (
    EXIT_DATA_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    UsageError,
    print_error,
)
from cluster.head_state import settle_ray_auth_mode
from storage.errors import RaybrokerError

# In the order `--help` lists them.
COMMAND_MODULES = (
    dump_log_command,
    demos,
    lifecycle,
    topics_command,
    produce_command,
    consume,
    offsets,
    consumer_groups_command,
    share_groups_command,
    iceberg_command,
    status,
    balancer,
    reassign_command,
    transactions_command,
    sql_command,
    stream_command,
    users,
    acls_command,
)

__all__ = ["EXIT_DATA_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The `raybroker` parser; each subcommand stores its handler in `handler`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="raybroker: a Kafka-style log broker built from Ray actors, with a Kafka-compatible storage layer.",
        epilog=(
            "Exit codes: 0 ok, 1 data or broker error (corrupt file, no broker, unknown topic, ...), "
            "2 usage error, 130 interrupted."
        ),
    )
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_commands(subcommands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs `raybroker`; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        # argparse exits 0 after --help and 2 after a usage error; main returns codes instead of exiting.
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    settle_ray_auth_mode(starting_head=args.command == "start" and getattr(args, "address", None) is None)
    try:
        return handler(args)
    except BrokenPipeError:
        # The reader went away (`raybroker dump-log x.log | head`): stop quietly, and point stdout at /dev/null so
        # that the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_DATA_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except UsageError as exc:
        print_error(str(exc))
        return EXIT_USAGE
    except (RaybrokerError, OSError) as exc:
        print_error(str(exc))
        return EXIT_DATA_ERROR
    except Exception as exc:
        # Last resort: a bug must still end as one line, not a traceback (the promise of the module docstring).
        print_error(f"internal error: {type(exc).__name__}: {exc}")
        return EXIT_DATA_ERROR


if __name__ == "__main__":
    sys.exit(main())
