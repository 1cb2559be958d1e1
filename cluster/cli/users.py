"""`raybroker users`: SCRAM credentials, as `kafka-configs.sh --entity-type users --alter --add-config
'SCRAM-SHA-256=[iterations=N,password=P]'` manages them: `--add`, `--delete`, `--list`.

The password never comes from the command line (where `ps` and shell history would show it): it is the first line
of `--password-file`, else of stdin, read with a prompt and no echo when stdin is a terminal. It is salted and
hashed before it leaves this process, and appears in no output, error or log.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from cluster.cli.command_support import EXIT_OK, UsageError, add_command, connect_admin, positive_int


def add_commands(subcommands: Any) -> None:
    users = add_command(
        subcommands,
        "users",
        "add, delete and list users' SCRAM credentials like kafka-configs.sh --entity-type users",
        "Manage the SCRAM credentials SASL clients log in with (and SASL PLAIN checks passwords against), like "
        "kafka-configs.sh --entity-type users. --add reads the password from --password-file, else from stdin "
        "(prompting without echo on a terminal); --list prints one line per user and mechanism, "
        "'NAME<tab>SCRAM-SHA-256=iterations=4096', never a key or password.",
    )
    actions = users.add_mutually_exclusive_group(required=True)
    actions.add_argument("--add", metavar="NAME", help="set NAME's credential for --mechanism")
    actions.add_argument("--delete", metavar="NAME", help="delete NAME's credential for --mechanism, or all of them")
    actions.add_argument("--list", action="store_true", help="list every user's mechanisms and iterations")
    users.add_argument("--mechanism", metavar="M", help="the SCRAM mechanism: SCRAM-SHA-256 or SCRAM-SHA-512")
    users.add_argument(
        "--iterations", type=positive_int, metavar="N", help="--add: PBKDF2 iterations, 4096..16384 (default 4096)"
    )
    users.add_argument(
        "--password-file", type=Path, metavar="F", help="--add: the password is the first line of F (default: stdin)"
    )
    users.set_defaults(handler=run_users)


def _check_user_options(args: argparse.Namespace) -> None:
    # The security model loads Ray (through `actors`), so only once the command runs, as every broker command does.
    from actors.core.security.scram import UnsupportedSaslMechanismError, check_mechanism

    if args.add is not None and args.mechanism is None:
        raise UsageError("users --add needs --mechanism SCRAM-SHA-256 or SCRAM-SHA-512")
    if args.add is None and (args.iterations is not None or args.password_file is not None):
        raise UsageError("--iterations and --password-file go with --add")
    if args.list and args.mechanism is not None:
        raise UsageError("--list takes no --mechanism")
    if args.mechanism is not None:
        try:
            check_mechanism(args.mechanism)
        except UnsupportedSaslMechanismError as exc:
            raise UsageError(str(exc)) from None
    for name in (args.add, args.delete):
        if name is not None and not name:
            raise UsageError("a user name must not be empty")


def run_users(args: argparse.Namespace) -> int:
    _check_user_options(args)
    if args.add is not None:
        password = read_password(args.password_file, args.add)
        admin = connect_admin(args.address)
        if args.iterations is None:
            admin.upsert_scram_credential(args.add, args.mechanism, password)
        else:
            admin.upsert_scram_credential(args.add, args.mechanism, password, args.iterations)
        print(f"Completed updating config for user {args.add}.")
    elif args.delete is not None:
        connect_admin(args.address).delete_scram_credential(args.delete, args.mechanism)
        print(f"Completed updating config for user {args.delete}.")
    else:
        for user, mechanisms in connect_admin(args.address).describe_scram_credentials().items():
            for mechanism, iterations in mechanisms.items():
                print(f"{user}\t{mechanism}=iterations={iterations}")
    return EXIT_OK


def read_password(password_file: Path | None, user: str) -> str:
    """The first line of `password_file`, else of stdin (prompting without echo on a terminal), without its line
    end; an empty or missing one is a `UsageError` (whose message never holds the password)."""
    if password_file is not None:
        try:
            with password_file.open(encoding="utf-8") as lines:
                line = lines.readline()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the password file {password_file}: {type(exc).__name__}") from None
    elif sys.stdin.isatty():
        line = getpass.getpass(f"Password for {user}: ")
    else:
        line = sys.stdin.readline()
    password = line.removesuffix("\n").removesuffix("\r")
    if not password:
        raise UsageError("the password is empty")
    return password
