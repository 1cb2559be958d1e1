"""The `raybroker` command line (console entry point `raybroker = cluster.cli.main:main`).

Subcommands:

    raybroker dump-log [--print-data-log] [--deep-iteration] [--json] FILE...
        Print the contents of log-dir files offline, like Kafka's kafka-dump-log.sh (see `storage/dump_log.py`
        for the file kinds and output formats). Imports no Ray or Spark, so it starts in a fraction of a second.
    raybroker demo [--dir DIR] [--events N] [--no-spark]
        The main job on an embedded default: a local Ray, the broker, a topic, producers and consumers, and
        Spark analytics over the live partitions through RayDP.
    raybroker storage-demo [--dir DIR]
        A storage-only demo (no Ray): writes a small partition log with every codec, reads it back, rolls it.
    raybroker start | stop | topics | produce | consume | get-offsets | delete-records [--address ADDR] ...
        The broker on Ray, modelled on Kafka's tools (kafka-server-start.sh, kafka-topics.sh,
        kafka-console-producer.sh, ...); see `cluster/cli/broker_commands.py` for each command and its output.
    raybroker sql QUERY --topic T [--topic T2] [--value-format FMT] [--starting-offsets SPEC] [--address ADDR]
        Spark SQL over live topics, each registered as a view named after it (see `cluster/cli/sql_command.py`).

This module imports only the standard library, `storage.errors` and the argument parsers of
`cluster.cli.broker_commands` and `cluster.cli.sql_command` at load time; every subcommand imports what it needs when it
runs, so `dump-log` never pays for Ray, and only the broker and sql commands import it.

Exit codes:

    0    success
    1    data or broker error: a file is corrupt, truncated or unreadable (dump-log still prints what it
         could decode); no Ray cluster or no broker running; an unknown topic or partition, an invalid topic
         name or config, or any other request the broker refuses
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
from pathlib import Path

from cluster.cli.broker_commands import ADDRESS_HELP, UsageError, add_broker_commands
from cluster.cli.sql_command import add_sql_command
from storage.errors import RaybrokerError

EXIT_OK = 0
EXIT_DATA_ERROR = 1
EXIT_USAGE = 2
# What a shell reports for a process killed by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130

PROG = "raybroker"


def _print_error(message: str) -> None:
    # Errors relayed from Ray actors can span lines (Ray appends the actor's details); the promise is one line.
    first_line = next((line for line in message.splitlines() if line.strip()), message)
    print(f"{PROG}: error: {first_line}", file=sys.stderr)


def _dump_log(args: argparse.Namespace) -> int:
    from storage.dump_log import SUPPORTED_FILES, DumpOptions, FileDump, classify

    names = list(args.files)
    for group in args.kafka_files or ():
        names.extend(name for name in group.split(",") if name)
    if not names:
        _print_error("dump-log needs at least one FILE")
        return EXIT_USAGE
    options = DumpOptions(print_data_log=args.print_data_log, deep_iteration=args.deep_iteration)
    exit_code = EXIT_OK
    for name in names:
        path = Path(name)
        if not path.exists():
            _print_error(f"{name}: no such file")
            exit_code = max(exit_code, EXIT_USAGE)
            continue
        if not path.is_file():
            _print_error(f"{name}: not a regular file")
            exit_code = max(exit_code, EXIT_USAGE)
            continue
        info = classify(path)
        if info is None:
            _print_error(f"{name}: unknown file kind; dump-log reads {SUPPORTED_FILES}")
            exit_code = max(exit_code, EXIT_USAGE)
            continue
        dump = FileDump(info, options)
        for line in dump.json_lines() if args.json else dump.text_lines():
            print(line)
        if dump.failed:
            exit_code = max(exit_code, EXIT_DATA_ERROR)
    return exit_code


def _demo(args: argparse.Namespace) -> int:
    from cluster.demos.broker_demo import run_broker_demo

    return run_broker_demo(args.dir, events=args.events, spark=not args.no_spark)


def _storage_demo(args: argparse.Namespace) -> int:
    from cluster.demos.storage_demo import run_storage_demo

    return run_storage_demo(args.dir)


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

    dump = subcommands.add_parser(
        "dump-log",
        help="print the contents of log-dir files offline (like kafka-dump-log.sh)",
        description=(
            "Print the contents of Kafka log-dir files without starting anything: .log segments and KRaft "
            "*.checkpoint snapshots (batches, magic 0/1/2), .index and .timeindex entries, offset and "
            "leader-epoch checkpoints, meta.properties and .kafka_cleanshutdown. Files are opened read-only. "
            "A damaged file prints what could be decoded, then 'Found error at position N: ...' (or a JSON "
            'object {"error", "position"}) and the exit code is 1.'
        ),
        epilog="Exit codes: 0 ok, 1 data error (corrupt, truncated or unreadable file), 2 usage error.",
    )
    dump.add_argument("files", nargs="*", metavar="FILE", help="files to dump, in order")
    dump.add_argument(
        "--files",
        dest="kafka_files",
        action="append",
        metavar="FILE[,FILE...]",
        help="comma-separated files, as kafka-dump-log.sh takes them (may be repeated)",
    )
    dump.add_argument(
        "--print-data-log",
        action="store_true",
        help="print record keys and values (implies --deep-iteration); JSON gives them as hex",
    )
    dump.add_argument(
        "--deep-iteration",
        action="store_true",
        help="decode every record of every batch and print one line per record",
    )
    dump.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line: the file, then one per batch or entry",
    )
    dump.set_defaults(handler=_dump_log)

    demo = subcommands.add_parser(
        "demo",
        help="the main job: an embedded Ray, the broker, a topic, producers and consumers",
        description=(
            "Start an embedded Ray cluster and the broker over two log dirs in a new temporary folder, create "
            "the topic 'page-views' with 4 partitions, produce msgpack page-view events through the idempotent "
            "producer, consume them back in a group and check every event came back exactly once, run Spark "
            "(RayDP) aggregations twice over the live partitions while a producer keeps writing, then shut "
            "everything down cleanly. Prints each step with its time."
        ),
    )
    demo.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="folder for the demo's log dirs (default: a new temporary folder, kept for inspection)",
    )
    demo.add_argument("--events", type=int, default=20_000, help="page-view events to produce (default 20000)")
    demo.add_argument("--no-spark", action="store_true", help="skip the Spark analytics step (no Java needed)")
    demo.set_defaults(handler=_demo)

    storage_demo = subcommands.add_parser(
        "storage-demo",
        help="a storage-only demo (no Ray): write, roll and read a partition log",
        description=(
            "Write a small partition log with every codec (none, gzip, snappy, lz4, zstd) and record headers, "
            "roll it, read it back and print where its files are. Starts no Ray; takes well under a second."
        ),
    )
    storage_demo.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory to write the demo log into (default: a new temporary directory, kept for inspection)",
    )
    storage_demo.set_defaults(handler=_storage_demo)

    add_broker_commands(subcommands)
    add_sql_command(subcommands, ADDRESS_HELP)
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
        _print_error(str(exc))
        return EXIT_USAGE
    except (RaybrokerError, OSError) as exc:
        _print_error(str(exc))
        return EXIT_DATA_ERROR
    except Exception as exc:
        # Last resort: a bug must still end as one line, not a traceback (the promise of the module docstring).
        _print_error(f"internal error: {type(exc).__name__}: {exc}")
        return EXIT_DATA_ERROR


if __name__ == "__main__":
    sys.exit(main())
