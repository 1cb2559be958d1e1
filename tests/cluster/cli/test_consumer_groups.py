"""`raybroker consumer-groups`: usage errors without Ray, then against a real broker the groups of raybroker's
Python `Consumer`: listed, described with committed offset, log end offset and lag per partition (the oracle is
what was produced and committed), reset (dry run, then `--execute`, clamped to the log), some of its offsets
deleted, and deleted. Groups of
wire clients are described in tests/cluster/protocol/test_kafka_groups.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from actors.clients.consumer import Consumer
from cluster.cli.main import EXIT_DATA_ERROR, EXIT_OK, EXIT_USAGE
from tests.cluster.cli.cli_support import one_error_line
from tests.cluster.cli.cli_support import run as run_cli
from tests.cluster.cli.group_support import committed_group

TOPIC = "cli-groups"
GROUP = "cli-python-group"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "consumer-groups", *argv)


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == EXIT_OK
    assert "--reset-offsets" in out and "--describe" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--describe"], "--describe needs --group"),
        (["--delete"], "--delete needs --group"),
        (["--reset-offsets", "--group", "g", "--to-latest"], "--reset-offsets needs --topic"),
        (["--reset-offsets", "--group", "g", "--topic", "t"], "needs one of --to-earliest"),
        (["--list", "--to-earliest"], "go with --reset-offsets"),
        (["--describe", "--group", "g", "--execute"], "go with --reset-offsets"),
        (["--delete-offsets", "--topic", "t"], "--delete-offsets needs --group"),
        (["--delete-offsets", "--group", "g"], "--delete-offsets needs --topic"),
        (["--delete-offsets", "--group", "g", "--topic", "t:one"], "partition numbers"),
        (["--delete-offsets", "--group", "g", "--topic", "t:-1"], "not negative"),
        (["--reset-offsets", "--group", "g", "--topic", "t:0", "--to-latest"], "takes a topic name"),
    ],
)
def test_option_combinations_it_refuses_are_one_line_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert message in one_error_line(err)


def test_an_action_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--group", "g")
    assert code == EXIT_USAGE and "Traceback" not in err


@pytest.mark.ray
def test_a_python_consumer_group_is_listed_described_reset_and_deleted(
    start_test_broker: Callable[..., tuple[Any, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    start_test_broker(log_dirs_count=1)
    committed_group(TOPIC, GROUP, 10, {0: 2, 1: 5})

    code, out, _ = run(capsys, "--list")
    assert (code, out.split()) == (EXIT_OK, [GROUP])

    code, out, _ = run(capsys, "--describe", "--group", GROUP)
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0] == f"Consumer group '{GROUP}' has no active members."
    assert lines[1].split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    assert [line.split() for line in lines[2:]] == [
        [GROUP, TOPIC, "0", "2", "5", "3", "-", "-", "-"],
        [GROUP, TOPIC, "1", "5", "5", "0", "-", "-", "-"],
    ]

    code, out, _ = run(capsys, "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-offset", "4")
    assert code == EXIT_OK
    assert [line.split() for line in out.splitlines()[1:3]] == [[GROUP, TOPIC, "0", "4"], [GROUP, TOPIC, "1", "4"]]
    assert "Dry run" in out
    code, out, _ = run(capsys, "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-offset", "99", "--execute")
    assert code == EXIT_OK
    assert [line.split()[3] for line in out.splitlines()[1:]] == ["5", "5"]
    checker = Consumer(group_id=GROUP)
    try:
        assert (checker.committed((TOPIC, 0)), checker.committed((TOPIC, 1))) == (5, 5)
    finally:
        checker.close()

    code, out, _ = run(capsys, "--delete-offsets", "--group", GROUP, "--topic", f"{TOPIC}:0")
    assert code == EXIT_OK
    assert [line.split() for line in out.splitlines() if line.strip()] == [
        f"Request succeed for deleting offsets with topic {TOPIC} group {GROUP}".split(),
        ["TOPIC", "PARTITION", "STATUS"],
        [TOPIC, "0", "Successful"],
    ]
    code, out, _ = run(capsys, "--describe", "--group", GROUP)
    assert [line.split()[1:4] for line in out.splitlines()[2:]] == [[TOPIC, "1", "5"]]
    code, _, err = run(capsys, "--delete-offsets", "--group", "never-seen", "--topic", TOPIC)
    assert code == EXIT_DATA_ERROR
    assert "does not exist" in one_error_line(err)

    code, out, _ = run(capsys, "--delete", "--group", GROUP)
    assert (code, out.strip()) == (EXIT_OK, f"Deletion of requested consumer groups ('{GROUP}') was successful.")
    code, _, err = run(capsys, "--describe", "--group", GROUP)
    assert code == EXIT_DATA_ERROR
    assert "does not exist" in one_error_line(err)
    code, _, err = run(capsys, "--delete", "--group", GROUP)
    assert code == EXIT_DATA_ERROR
    assert "GROUP_ID_NOT_FOUND" in one_error_line(err)
