"""The `raybroker` command line: exit codes, one-line errors, help, dump-log end to end, and the storage demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import storage.dump_log
from cluster.cli.main import EXIT_DATA_ERROR, EXIT_OK, EXIT_USAGE, main
from storage.records.record_batch import RecordBatchBuilder, set_base_offset_and_epoch

REPO_ROOT = Path(__file__).resolve().parents[3]
TS = 1_700_000_000_000
LOG_NAME = "00000000000000000000.log"


def log_bytes(count: int) -> bytes:
    """`count` one-record batches with consecutive offsets."""
    out = bytearray()
    for offset in range(count):
        builder = RecordBatchBuilder()
        builder.append(f"k{offset}".encode(), f"v{offset}".encode(), timestamp=TS + offset)
        start = len(out)
        out += builder.build()
        set_base_offset_and_epoch(out, start, offset, 0)
    return bytes(out)


@pytest.fixture
def good_log(tmp_path: Path) -> Path:
    path = tmp_path / "good" / LOG_NAME
    path.parent.mkdir()
    path.write_bytes(log_bytes(3))
    return path


@pytest.fixture
def truncated_log(tmp_path: Path) -> Path:
    path = tmp_path / "bad" / LOG_NAME
    path.parent.mkdir()
    path.write_bytes(log_bytes(3)[:-5])
    return path


def json_lines(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines()]


def test_dump_log_json_prints_one_row_per_batch(good_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dump-log", "--json", "--print-data-log", str(good_log)])
    captured = capsys.readouterr()
    rows = json_lines(captured.out)
    assert code == EXIT_OK
    assert captured.err == ""
    assert [row["baseOffset"] for row in rows] == [0, 1, 2]
    assert rows[1]["records"] == [
        {"offset": 1, "timestamp": TS + 1, "key": b"k1".hex(), "value": b"v1".hex(), "headers": []}
    ]


def test_dump_log_text_mirrors_kafka(good_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dump-log", "--deep-iteration", str(good_log)])
    lines = capsys.readouterr().out.splitlines()
    assert code == EXIT_OK
    assert lines[:2] == [f"Dumping {good_log}", "Log starting offset: 0"]
    assert lines[2].startswith("baseOffset: 0 lastOffset: 0 count: 1 ")
    assert lines[3] == f"| offset: 0 CreateTime: {TS} keySize: 2 valueSize: 2 sequence: -1 headerKeys: []"
    assert len(lines) == 2 + 3 * 2


def test_truncated_file_prints_what_it_decoded_and_exits_1(
    truncated_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["dump-log", "--json", str(truncated_log)])
    rows = json_lines(capsys.readouterr().out)
    assert code == EXIT_DATA_ERROR
    assert [row.get("baseOffset") for row in rows[:-1]] == [0, 1]
    assert rows[-1] == {
        "error": f"file is truncated: the last {rows[1]['size'] - 5} bytes are a partial batch",
        "position": 2 * rows[0]["size"],
    }


def test_several_files_are_dumped_in_turn_and_any_failure_fails_the_run(
    good_log: Path, truncated_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["dump-log", str(truncated_log), str(good_log)])
    out = capsys.readouterr().out
    assert code == EXIT_DATA_ERROR
    assert out.count("Dumping ") == 2
    assert (
        out.index(f"Dumping {truncated_log}") < out.index("Found error at position") < out.index(f"Dumping {good_log}")
    )


def test_kafka_style_comma_separated_files_option(good_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dump-log", "--files", f"{good_log},{good_log}"])
    assert code == EXIT_OK
    assert capsys.readouterr().out.count(f"Dumping {good_log}") == 2


@pytest.mark.parametrize(
    ("name", "message"),
    [("missing.log", "no such file"), ("notes.txt", "unknown file kind"), ("a-dir", "not a regular file")],
)
def test_bad_file_arguments_are_one_line_usage_errors(
    tmp_path: Path, good_log: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "a-dir").mkdir()
    code = main(["dump-log", str(tmp_path / name), str(good_log)])
    captured = capsys.readouterr()
    assert code == EXIT_USAGE
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"raybroker: error: {tmp_path / name}: {message}")
    assert f"Dumping {good_log}" in captured.out


def test_dump_log_without_files_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump-log"]) == EXIT_USAGE
    assert capsys.readouterr().err == "raybroker: error: dump-log needs at least one FILE\n"


def test_unexpected_exception_is_one_line_not_a_traceback(
    good_log: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(self: object) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(storage.dump_log.FileDump, "text_lines", explode)
    code = main(["dump-log", str(good_log)])
    assert code == EXIT_DATA_ERROR
    assert capsys.readouterr().err == "raybroker: error: internal error: ValueError: boom\n"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--help"], "dump-log"),
        (["dump-log", "--help"], "--print-data-log"),
        (["storage-demo", "--help"], "--dir"),
        (["demo", "--help"], "--events"),
        (["drain", "--help"], "--broker ID"),
        (["balance", "--help"], "--dry-run"),
    ],
)
def test_help_exits_0_and_describes_the_commands(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("usage: raybroker")
    assert expected in out
    assert "Exit codes" in out or argv[0] in ("demo", "storage-demo")


def test_no_command_or_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert main(["dump-log", "--no-such-option", "x.log"]) == EXIT_USAGE
    assert "usage: raybroker" in capsys.readouterr().err


def test_demo_runs_and_leaves_a_log_that_dump_log_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["storage-demo", "--dir", str(tmp_path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "[5/5]" in out
    logs = sorted((tmp_path / "demo-0").glob("*.log"))
    assert len(logs) >= 3  # the size roll and the hand roll

    assert main(["dump-log", "--json", "--print-data-log", *map(str, logs)]) == EXIT_OK
    rows = json_lines(capsys.readouterr().out)
    offsets = [record["offset"] for row in rows if "records" in row for record in row["records"]]
    assert offsets == list(range(18))
    codecs = {row["compresscodec"] for row in rows if "compresscodec" in row}
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_subprocess_corrupt_and_missing_files_end_without_traceback(truncated_log: Path, tmp_path: Path) -> None:
    corrupt = run_cli("dump-log", "--print-data-log", str(truncated_log))
    missing = run_cli("dump-log", "--json", str(tmp_path / "missing.log"))

    assert corrupt.returncode == EXIT_DATA_ERROR
    assert "Found error at position" in corrupt.stdout
    assert corrupt.stderr == ""
    assert missing.returncode == EXIT_USAGE
    assert missing.stdout == ""
    assert missing.stderr == f"raybroker: error: {tmp_path / 'missing.log'}: no such file\n"
    assert "Traceback" not in corrupt.stderr + missing.stderr


def test_dump_log_imports_no_ray_or_spark(good_log: Path) -> None:
    script = (
        "import sys\n"
        "from cluster.cli.main import main\n"
        f"code = main(['dump-log', '--json', {str(good_log)!r}])\n"
        "print(sorted(name for name in ('ray', 'raydp', 'pyspark') if name in sys.modules), code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[] 0"
