"""What the `raybroker` commands share: the usage error, argument types, and the shape of a broker command.

Usage errors exit 2: argparse's own (two lines: usage, then the error), and option combinations a command does
not accept (`UsageError`, one line). Every broker command takes `--address` (`cluster.runtime.connect_to_cluster`
says which cluster that picks without it) and ends its `--help` with the exit codes.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.clients.admin import Admin

# The exit codes of every command (`cluster.cli.main` lists what each means).
EXIT_OK = 0
EXIT_DATA_ERROR = 1
EXIT_USAGE = 2
# What a shell reports for a process killed by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130

PROG = "raybroker"

ADDRESS_HELP = (
    "the Ray cluster to use: HOST:PORT of its GCS, or 'auto' (Ray picks the cluster this machine started last, "
    "whichever program started it). Default: $RAY_ADDRESS, else the head `raybroker start` recorded here; "
    "without either the command refuses rather than guess. A cluster with Ray's token authentication "
    "needs RAY_AUTH_MODE=token for an explicit address, except the head `raybroker start` started here"
)
BROKER_EPILOG = (
    "Exit codes: 0 ok; 1 broker error (no cluster or broker, unknown topic or partition, invalid topic name or "
    "config), one line on stderr; 2 usage error; 130 interrupted (Ctrl-C)."
)


@contextlib.contextmanager
def set_on_interrupt(interrupted: threading.Event) -> Iterator[None]:
    """Ctrl-C sets `interrupted` while the block runs, instead of raising `KeyboardInterrupt` wherever the main
    thread is: inside a Ray or py4j call the exception can be swallowed or leave the call's state half changed, and
    the command then neither stops nor cleans up. A command's loop checks the event and stops itself. Off the main
    thread (where Python cannot install a handler) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: interrupted.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def print_error(message: str) -> None:
    """`raybroker: error: <message>` on stderr, the message's first line only."""
    # Errors relayed from Ray actors can span lines (Ray appends the actor's details); the promise is one line.
    shown = next((line for line in message.splitlines() if line.strip()), message)
    print(f"{PROG}: error: {shown}", file=sys.stderr)


class UsageError(Exception):
    """Options a command does not accept together (exit 2, one line)."""


def first_line(text: str) -> str:
    """The first non-blank line of a longer message (Spark's errors span many), stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), text)


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected an integer >= 1, got '0'")
    return value


def key_value(text: str) -> tuple[str, str]:
    key, found, value = text.partition("=")
    if not found or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Left-aligned columns as Kafka's tools print them, one line per row after the header. A cell holding a
    character that does not print (a group name with a newline) is shown escaped (`repr`), so it cannot break
    the table."""
    cells = [[cell if cell.isprintable() else repr(cell) for cell in row] for row in (header, *rows)]
    widths = [max(len(cell) for cell in column) for column in zip(*cells, strict=True)]
    return [
        indent + " ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def add_command(
    subcommands: Any, name: str, help_text: str, description: str, epilog: str = BROKER_EPILOG
) -> argparse.ArgumentParser:
    """A subcommand of `subcommands` (the result of `add_subparsers`) that talks to a cluster: `--address`, and
    the exit codes as its epilog."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
        name, help=help_text, description=description, epilog=epilog
    )
    parser.add_argument("--address", metavar="ADDR", default=None, help=ADDRESS_HELP)
    return parser


def add_actions(parser: argparse.ArgumentParser, actions: Sequence[tuple[str, str]]) -> None:
    """The command's actions, each a flag (`--create`, `--list`, ...) with its help, as Kafka's tools take them:
    exactly one is required, and `args.action` is its name."""
    group = parser.add_mutually_exclusive_group(required=True)
    for action, text in actions:
        group.add_argument(f"--{action}", dest="action", action="store_const", const=action, help=text)


def connect(address: str | None) -> None:
    """`cluster.runtime.connect_to_cluster`, loaded when a command runs."""
    # Ray: loaded only when a broker command runs, so `dump-log` and `--help` start without it (~0.5 s).
    from cluster.runtime import connect_to_cluster

    connect_to_cluster(address)


def connect_admin(address: str | None) -> Admin:
    """An `Admin` client of the cluster at `address`."""
    connect(address)
    # Ray (through the actors): loaded only when a command runs, so the CLI starts fast.
    from actors.clients.admin import Admin

    return Admin()
