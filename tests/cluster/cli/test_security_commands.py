"""`raybroker users` and `raybroker acls` (`cluster/cli/users.py`, `acls.py`, `acl_options.py`): kafka-configs.sh's
and kafka-acls.sh's behaviour end to end, and a password that never shows.

Help, usage errors and the reading of options need no broker; the rest runs in-process (`main([...])`) against a
broker from `start_test_broker`, as `test_broker_commands` does.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cluster.cli.command_support import UsageError
from cluster.cli.main import EXIT_DATA_ERROR, EXIT_OK, EXIT_USAGE, build_parser
from tests.cluster.cli.cli_support import one_error_line, run

StartBroker = Callable[..., tuple[Any, list[Path]]]
PASSWORD = "Tr0ub4dor&3-horse"


def feed_stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


# --- without a broker ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["users", "acls"])
def test_help_exits_0_with_address_and_exit_codes(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, command, "--help")
    assert code == EXIT_OK
    assert out.startswith(f"usage: raybroker {command}")
    assert "--address ADDR" in out and "Exit codes" in out
    assert command in run(capsys, "--help")[1]


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["users", "--add", "alice"], "", "needs --mechanism"),
        (["users", "--list", "--iterations", "5000"], "", "go with --add"),
        (["users", "--delete", "alice", "--password-file", "f"], "", "go with --add"),
        (["users", "--list", "--mechanism", "SCRAM-SHA-256"], "", "--list takes no --mechanism"),
        (["users", "--add", "alice", "--mechanism", "PLAIN"], "", "unknown SCRAM mechanism"),
        (["users", "--add", "", "--mechanism", "SCRAM-SHA-256"], "x\n", "must not be empty"),
        (["users", "--add", "alice", "--mechanism", "SCRAM-SHA-256"], "\nsecond line\n", "the password is empty"),
        (["users", "--add", "alice", "--mechanism", "SCRAM-SHA-256"], "", "the password is empty"),
        (["users", "--add", "a", "--mechanism", "SCRAM-SHA-256", "--password-file", "/nonexistent/pw"], "", "cannot"),
        (["acls", "--list", "--producer", "--topic", "t"], "", "--list takes no"),
        (["acls", "--add", "--producer", "--allow-principal", "User:a"], "", "with --producer you must specify"),
        (["acls", "--add", "--producer", "--topic", "t", "--operation", "Read"], "", "take no --operation"),
        (["acls", "--add", "--consumer", "--topic", "t", "--allow-principal", "User:a"], "", "and a --group"),
        (["acls", "--add", "--idempotent", "--topic", "t"], "", "--idempotent goes with --producer"),
        (["acls", "--add", "--topic", "t", "--principal", "User:a"], "", "--principal goes with --list"),
        (["acls", "--add", "--topic", "t"], "", "--allow-principal or --deny-principal"),
        (["acls", "--add", "--allow-principal", "User:a"], "", "at least one resource"),
        (["acls", "--add", "--topic", "t", "--allow-principal", "alice"], "", "Type:name"),
        (["acls", "--add", "--topic", "t", "--allow-principal", "User:a", "--operation", "Reed"], "", "--operation"),
        (["acls", "--add", "--cluster", "--allow-principal", "User:a", "--operation", "Read"], "", "only supports"),
        (["acls", "--add", "--group", "g", "--allow-principal", "User:a", "--operation", "Write"], "", "only supports"),
        (
            ["acls", "--add", "--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type", "any"],
            "",
            "not valid when adding",
        ),
        (["acls", "--list", "--resource-pattern-type", "fuzzy"], "", "--resource-pattern-type"),
    ],
)
def test_refused_options_are_one_line_usage_errors(
    argv: list[str], stdin: str, message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    feed_stdin(monkeypatch, stdin)
    code, out, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert out == ""
    assert message in one_error_line(err)


def test_the_password_comes_from_the_first_line_of_the_file_or_a_silent_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster.cli.users import read_password

    password_file = tmp_path / "pw"
    password_file.write_text(f"{PASSWORD}\r\nignored\n", encoding="utf-8")
    assert read_password(password_file, "alice") == PASSWORD
    password_file.write_text(PASSWORD, encoding="utf-8")
    assert read_password(password_file, "alice") == PASSWORD

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    prompts: list[str] = []
    monkeypatch.setattr(sys, "stdin", Terminal(""))
    monkeypatch.setattr("getpass.getpass", lambda prompt: prompts.append(prompt) or PASSWORD)
    assert read_password(None, "alice") == PASSWORD
    assert prompts == ["Password for alice: "]
    monkeypatch.setattr("getpass.getpass", lambda prompt: "")
    with pytest.raises(UsageError, match="empty"):
        read_password(None, "alice")


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["acls", *argv])


def test_producer_and_consumer_mean_what_kafka_acls_grants() -> None:
    from actors.core.security.acl_bindings import AclOperation, PatternType, ResourceType
    from cluster.cli.acl_options import resource_entries

    args = parsed(
        "--add", "--producer", "--consumer", "--idempotent", "--topic", "t", "--group", "g",
        "--allow-principal", "User:a", "--transactional-id", "tx",
    )  # fmt: skip
    plan = {resource: {entry[2] for entry in entries} for resource, entries in resource_entries(args).items()}
    literal = PatternType.LITERAL
    assert plan == {
        (ResourceType.TOPIC, "t", literal): {
            AclOperation.WRITE,
            AclOperation.DESCRIBE,
            AclOperation.CREATE,
            AclOperation.READ,
        },
        (ResourceType.CLUSTER, "kafka-cluster", literal): {AclOperation.IDEMPOTENT_WRITE},
        (ResourceType.GROUP, "g", literal): {AclOperation.READ},
        (ResourceType.TRANSACTIONAL_ID, "tx", literal): {AclOperation.WRITE, AclOperation.DESCRIBE},
    }


def test_entries_are_every_principal_operation_and_host() -> None:
    from actors.core.security.acl_bindings import AclOperation, AclPermissionType, PatternType, ResourceType
    from cluster.cli.acl_options import resource_entries

    args = parsed(
        "--add", "--topic", "t", "--resource-pattern-type", "Prefixed", "--allow-principal", "User:a",
        "--allow-principal", "User:b", "--operation", "Read", "--operation", "DescribeConfigs",
        "--allow-host", "10.0.0.1", "--deny-principal", "User:*",
    )  # fmt: skip
    ((resource, entries),) = resource_entries(args).items()
    assert resource == (ResourceType.TOPIC, "t", PatternType.PREFIXED)
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    read, describe_configs = AclOperation.READ, AclOperation.DESCRIBE_CONFIGS
    assert entries == [
        ("User:a", "10.0.0.1", read, allow),
        ("User:a", "10.0.0.1", describe_configs, allow),
        ("User:b", "10.0.0.1", read, allow),
        ("User:b", "10.0.0.1", describe_configs, allow),
        ("User:*", "*", read, deny),
        ("User:*", "*", describe_configs, deny),
    ]


# --- against a running broker ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(start_test_broker: StartBroker) -> tuple[Any, list[Path]]:
    # One __consumer_offsets partition (one actor process fewer to start): these tests never use groups.
    return start_test_broker(log_dirs_count=1, offsets_topic_num_partitions="1")


@pytest.mark.ray
def test_users_add_list_delete_and_the_password_never_shows(
    broker: tuple[Any, list[Path]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    password_file = tmp_path / "pw"
    password_file.write_text(PASSWORD + "\n", encoding="utf-8")
    outputs = []
    add_alice = ["users", "--add", "alice", "--mechanism", "SCRAM-SHA-256", "--password-file", str(password_file)]
    outputs.append(run(capsys, *add_alice))
    assert outputs[-1][:2] == (EXIT_OK, "Completed updating config for user alice.\n")
    feed_stdin(monkeypatch, PASSWORD + "\n")
    outputs.append(run(capsys, "users", "--add", "alice", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192"))
    assert outputs[-1][0] == EXIT_OK
    feed_stdin(monkeypatch, "bob-password\n")
    outputs.append(run(capsys, "users", "--add", "bob", "--mechanism", "SCRAM-SHA-256"))
    outputs.append(run(capsys, "users", "--list"))
    assert outputs[-1][:2] == (
        EXIT_OK,
        "alice\tSCRAM-SHA-256=iterations=4096\nalice\tSCRAM-SHA-512=iterations=8192\nbob\tSCRAM-SHA-256=iterations=4096\n",
    )
    feed_stdin(monkeypatch, PASSWORD + "\n")
    outputs.append(run(capsys, "users", "--add", "carol", "--mechanism", "SCRAM-SHA-256", "--iterations", "100"))
    assert outputs[-1][0] == EXIT_DATA_ERROR
    assert "iterations" in one_error_line(outputs[-1][2])

    outputs.append(run(capsys, "users", "--delete", "alice", "--mechanism", "SCRAM-SHA-512"))
    assert outputs[-1][:2] == (EXIT_OK, "Completed updating config for user alice.\n")
    outputs.append(run(capsys, "users", "--delete", "bob"))
    assert outputs[-1][0] == EXIT_OK
    outputs.append(run(capsys, "users", "--delete", "bob"))
    assert outputs[-1][0] == EXIT_DATA_ERROR
    assert "has no SCRAM credential" in one_error_line(outputs[-1][2])
    outputs.append(run(capsys, "users", "--list"))
    assert outputs[-1][1] == "alice\tSCRAM-SHA-256=iterations=4096\n"
    for _, out, err in outputs:
        assert PASSWORD not in out + err and "bob-password" not in out + err


# kafka-acls.sh's layout, down to the space that ends the title line.
LIST_ORDERS = (
    "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n"
    "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
    "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
    "\t(principal=User:*, host=10.0.0.9, operation=READ, permissionType=DENY)\n"
    "\n"
)


@pytest.mark.ray
def test_acls_add_list_and_remove_like_kafka_acls(
    broker: tuple[Any, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "acls", "--add", "--topic", "orders", "--allow-principal", "User:alice", "--operation", "Read",
        "--operation", "Describe", "--deny-principal", "User:*", "--deny-host", "10.0.0.9", "--operation", "Read",
    )  # fmt: skip
    assert code == EXIT_OK
    assert out == LIST_ORDERS.replace("Current ACLs", "Adding ACLs").replace(
        "(principal=User:*, host=10.0.0.9, operation=READ, permissionType=DENY)\n",
        "(principal=User:*, host=10.0.0.9, operation=READ, permissionType=DENY)\n"
        "\t(principal=User:*, host=10.0.0.9, operation=DESCRIBE, permissionType=DENY)\n",
    )
    assert run(capsys, "acls", "--remove", "--topic", "orders", "--deny-principal", "User:*", "--deny-host",
               "10.0.0.9", "--operation", "Describe", "--force")[0] == EXIT_OK  # fmt: skip
    assert run(capsys, "acls", "--list", "--topic", "orders")[:2] == (EXIT_OK, LIST_ORDERS)

    code, out, _ = run(
        capsys, "acls", "--add", "--producer", "--idempotent", "--topic", "pay", "--resource-pattern-type",
        "prefixed", "--allow-principal", "User:bob",
    )  # fmt: skip
    assert code == EXIT_OK
    assert "name=pay, patternType=PREFIXED" in out and "CLUSTER" not in out  # as Kafka: no PREFIXED cluster
    assert run(capsys, "acls", "--add", "--consumer", "--topic", "orders", "--group", "billing",
               "--allow-principal", "User:carol")[0] == EXIT_OK  # fmt: skip

    code, out, _ = run(capsys, "acls", "--list")
    assert code == EXIT_OK
    titles = [line for line in out.splitlines() if line.startswith("Current")]
    assert titles == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: ",
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=pay, patternType=PREFIXED)`: ",
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=billing, patternType=LITERAL)`: ",
    ]
    assert out.count("principal=User:bob") == 3 and out.count("principal=User:carol") == 3

    code, out, _ = run(capsys, "acls", "--list", "--topic", "pay-eu", "--resource-pattern-type", "match")
    assert out.count("\t(") == 3 and "name=pay, patternType=PREFIXED" in out
    code, out, _ = run(capsys, "acls", "--list", "--principal", "User:carol")
    assert out.startswith("ACLs for principal `User:carol`\n") and "User:alice" not in out

    code, out, _ = run(capsys, "acls", "--remove", "--topic", "orders")
    assert code == EXIT_OK and out.count("\t(") == 5
    code, out, _ = run(capsys, "acls", "--list", "--topic", "orders")
    assert (code, out) == (EXIT_OK, "")
