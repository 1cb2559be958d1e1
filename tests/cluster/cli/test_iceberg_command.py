"""`raybroker iceberg` without a cluster: its help, its usage errors, and the one-line error when no cluster runs
(its output on a running broker is tested in `tests/cluster/iceberg/test_translation_driver.py`)."""

from __future__ import annotations

import pytest

from cluster.cli.command_support import EXIT_DATA_ERROR, EXIT_OK, EXIT_USAGE
from tests.cluster.cli.cli_support import one_error_line, run


def test_help_exits_0_and_names_the_columns(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "iceberg", "--help")
    assert code == EXIT_OK
    assert "--describe" in out and "--topic" in out and "last stable offset" in " ".join(out.split())


def test_an_action_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "iceberg", "--topic", "t")
    assert code == EXIT_USAGE and "--describe" in err and "Traceback" not in err


def test_no_cluster_is_one_error_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code, out, err = run(capsys, "iceberg", "--describe", "--address", "127.0.0.1:1")
    assert code == EXIT_DATA_ERROR and not out
    one_error_line(err)
