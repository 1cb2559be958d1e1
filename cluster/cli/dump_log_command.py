"""`raybroker dump-log`, modelled on kafka-dump-log.sh: the contents of log-dir files, offline.

`storage.dump_log` decodes the files and formats their lines; this module only parses the arguments and picks
the exit code: the highest one met over the files (1 for a file that failed to decode, 2 for a missing file, a
directory or a kind dump-log does not read). Imports no Ray or Spark, so it starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cluster.cli.command_support import EXIT_DATA_ERROR, EXIT_OK, EXIT_USAGE, print_error
from storage.dump_log import SUPPORTED_FILES, DumpOptions, FileDump, classify


def add_commands(subcommands: Any) -> None:
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
    dump.set_defaults(handler=run_dump_log)


def run_dump_log(args: argparse.Namespace) -> int:
    names = list(args.files)
    for group in args.kafka_files or ():
        names.extend(name for name in group.split(",") if name)
    if not names:
        print_error("dump-log needs at least one FILE")
        return EXIT_USAGE
    options = DumpOptions(print_data_log=args.print_data_log, deep_iteration=args.deep_iteration)
    exit_code = EXIT_OK
    for name in names:
        path = Path(name)
        if not path.exists():
            print_error(f"{name}: no such file")
            exit_code = max(exit_code, EXIT_USAGE)
            continue
        if not path.is_file():
            print_error(f"{name}: not a regular file")
            exit_code = max(exit_code, EXIT_USAGE)
            continue
        info = classify(path)
        if info is None:
            print_error(f"{name}: unknown file kind; dump-log reads {SUPPORTED_FILES}")
            exit_code = max(exit_code, EXIT_USAGE)
            continue
        dump = FileDump(info, options)
        for line in dump.json_lines() if args.json else dump.text_lines():
            print(line)
        if dump.failed:
            exit_code = max(exit_code, EXIT_DATA_ERROR)
    return exit_code
