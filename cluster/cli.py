"""The `raybroker` command line (console entry point `raybroker = cluster.cli:main`).

Subcommands:

    raybroker dump-log [--print-data-log] [--deep-iteration] [--json] FILE...
        Print the contents of log-dir files offline, like Kafka's kafka-dump-log.sh (see `storage/dump_log.py`
        for the file kinds and output formats). Imports no Ray or Spark, so it starts in a fraction of a second.
    raybroker demo [--dir DIR]
        A storage-only demo: writes a small partition log with every codec, reads it back, shows a roll.

This module imports only the standard library and `storage.errors` at load time; every subcommand imports what
it needs when it runs, so `dump-log` never pays for Ray.

Exit codes:

    0  success
    1  data error: a file is corrupt, truncated or unreadable (dump-log still prints what it could decode)
       (also: an unexpected internal error, or stdout closed early as in `dump-log x.log | head`)
    2  usage error: bad arguments, a missing file, or a file kind dump-log does not read

With several files, each is dumped in turn and the exit code is the highest one met. Errors are one line on
stderr, `raybroker: error: <message>`, never a traceback; argparse's own usage errors keep its two-line form
(usage, then the error) and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from storage.errors import RaybrokerError

EXIT_OK = 0
EXIT_DATA_ERROR = 1
EXIT_USAGE = 2
# What a shell reports for a process killed by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130

PROG = "raybroker"


def _print_error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


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
    from cluster.storage_demo import run_storage_demo

    return run_storage_demo(args.dir)


def build_parser() -> argparse.ArgumentParser:
    """The `raybroker` parser; each subcommand stores its handler in `handler`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="raybroker: a Kafka-style log broker built from Ray actors, with a Kafka-compatible storage layer.",
        epilog="Exit codes: 0 ok, 1 data error (corrupt or unreadable file), 2 usage error.",
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
        help="run a storage-only demo: write, roll and read a partition log",
        description=(
            "Write a small partition log with every codec (none, gzip, snappy, lz4, zstd) and record headers, "
            "roll it, read it back and print where its files are. Starts no Ray; takes well under a second."
        ),
    )
    demo.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory to write the demo log into (default: a new temporary directory, kept for inspection)",
    )
    demo.set_defaults(handler=_demo)
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
    except (RaybrokerError, OSError) as exc:
        _print_error(str(exc))
        return EXIT_DATA_ERROR
    except Exception as exc:
        # Last resort: a bug must still end as one line, not a traceback (the promise of the module docstring).
        _print_error(f"internal error: {type(exc).__name__}: {exc}")
        return EXIT_DATA_ERROR


if __name__ == "__main__":
    sys.exit(main())
