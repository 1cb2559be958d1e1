"""What the CLI tests share: running `raybroker` in-process and checking its one-line errors."""

from __future__ import annotations

import pytest

from cluster.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Runs `raybroker *argv` in this process; returns (exit code, stdout, stderr). What the test printed before (a
    download's progress, fetching Kafka's tools on a machine's first run) is dropped first: it is not the command's."""
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    """`err` itself, after checking it is the CLI's one error line: no traceback, one line, `raybroker: error: `."""
    assert err.count("\n") == 1, err
    assert err.startswith("raybroker: error: "), err
    assert "Traceback" not in err
    return err
