"""The broker subcommands of `raybroker` (`cluster/cli/`: lifecycle, topics, produce, consume, offsets): Kafka-tool
behaviour end to end.

In-process `main([...])` calls run against a broker from `start_test_broker`: this process already holds Ray
(`ray_session`), so every command's `ensure_ray` attaches to it. Usage errors, help and the record formatter
need no Ray; the no-cluster case runs in a subprocess against a closed port.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster.cli.consume import RecordFormat, as_text
from cluster.cli.main import EXIT_DATA_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, main
from storage.records.record_batch import TimestampType
from tests.cluster.cli.cli_support import one_error_line, run

REPO_ROOT = Path(__file__).resolve().parents[3]
BROKER_COMMANDS = ("start", "stop", "topics", "produce", "consume", "get-offsets", "delete-records", "status")

StartBroker = Callable[..., tuple[Any, list[Path]]]


def feed_stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


# --- without Ray -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", BROKER_COMMANDS)
def test_every_broker_command_has_help_that_exits_0(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, command, "--help")
    assert code == EXIT_OK
    assert out.startswith(f"usage: raybroker {command}")
    assert "--address ADDR" in out
    assert "Exit codes" in out


def test_top_level_help_lists_the_broker_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == EXIT_OK
    for command in BROKER_COMMANDS:
        assert command in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["consume", "--topic", "t", "--offset", "3"], "--offset needs --partition"),
        (["consume", "--topic", "t", "--partition", "0", "--offset", "1", "--from-beginning"], "cannot be used"),
        (["consume", "--topic", "t", "--partition", "0", "--group", "g"], "--group and --partition"),
        (["topics", "--create", "--partitions", "2"], "topics --create needs --topic"),
        (["topics", "--alter", "--topic", "t"], "--alter needs --partitions"),
        (["topics", "--list", "--config", "a=b"], "--config goes with"),
        (["topics", "--alter", "--topic", "t", "--replication-factor", "2"], "--replication-factor goes with --create"),
        (["topics", "--list", "--under-replicated-partitions"], "go with --describe"),
        (["topics", "--create", "--topic", "t", "--unavailable-partitions"], "go with --describe"),
        (["produce", "--topic", "t", "--key-separator", ""], "--key-separator must not be empty"),
        (["start", "--address", "auto", "--metrics-port", "9100"], "--metrics-port goes with starting a head"),
        (["start", "--address", "auto", "--redis-address", "redis:6379"], "the GCS storage goes with starting a head"),
        (["start", "--address", "auto", "--no-gcs-fault-tolerance"], "the GCS storage goes with starting a head"),
    ],
)
def test_option_combinations_a_command_refuses_are_one_line_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert out == ""
    assert message in one_error_line(err)


@pytest.mark.parametrize(
    "argv",
    [
        ["get-offsets", "--topic", "t", "--time", "nonsense"],
        ["get-offsets", "--topic", "t", "--time", "-4"],
        ["topics", "--create", "--topic", "t", "--config", "no-equals-sign"],
        ["topics", "--create", "--topic", "t", "--partitions", "0"],
        ["topics", "--create", "--topic", "t", "--replication-factor", "0"],
        ["topics", "--create", "--topic", "t", "--replication-factor", "-1"],
        ["consume", "--topic", "t", "--partition", "0", "--offset", "-5"],
        ["delete-records", "--topic", "t", "--partition", "0", "--offset", "-2"],
        ["topics", "--list", "--describe"],
        ["produce", "--topic", "t", "--compression", "brotli"],
        ["start", "--gcs-storage-path", "/tmp/gcs", "--redis-address", "redis:6379"],
        ["start", "--redis-address", "redis:6379", "--no-gcs-fault-tolerance"],
    ],
)
def test_malformed_arguments_are_argparse_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert out == ""
    assert err.startswith("usage: raybroker")


def test_record_format_follows_kafkas_default_message_formatter() -> None:
    from actors.clients.consumer import ConsumerRecord

    record = ConsumerRecord("t", 3, 42, 1_700_000_000_123, TimestampType.CREATE_TIME, b"k", b"v", ())
    everything = RecordFormat(timestamp=True, partition=True, offset=True, key=True)
    assert everything.render(record) == "CreateTime:1700000000123\tPartition:3\tOffset:42\tk\tv"
    assert RecordFormat().render(record) == "v"
    assert RecordFormat(key=True, separator=" | ").render(record) == "k | v"
    untimed = ConsumerRecord("t", 0, 0, -1, TimestampType.NO_TIMESTAMP_TYPE, None, None, ())
    assert RecordFormat(timestamp=True, key=True).render(untimed) == "NO_TIMESTAMP\tnull\tnull"


def test_bytes_that_are_not_utf8_are_shown_as_escapes_not_evaluated() -> None:
    assert as_text("héllo".encode()) == "héllo"
    assert as_text(b"a\xffb\xc3") == "a\\xffb\\xc3"
    assert as_text(b"__import__('os')") == "__import__('os')"
    assert as_text(None) == "null"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("command", [["topics", "--list"], ["status"]])
def test_no_cluster_fails_fast_with_one_line_in_a_subprocess(command: list[str]) -> None:
    """Fast means within 5 s of the same command given a malformed Ray address, which takes the same imports and
    the same path up to the probe but tries no connection (Ray's own retries to reach a missing cluster last a
    minute and more); the baseline, measured just before, keeps the check fair on a loaded machine."""

    def timed(address: str) -> tuple[subprocess.CompletedProcess[str], float]:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "cluster.cli.main", *command],
            cwd=REPO_ROOT,
            env={**os.environ, "RAY_ADDRESS": address},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return result, time.monotonic() - started

    malformed, baseline_s = timed("no-port-here")
    assert malformed.returncode == EXIT_DATA_ERROR
    assert "bad Ray address 'no-port-here'" in one_error_line(malformed.stderr)
    result, elapsed_s = timed(f"127.0.0.1:{closed_port()}")
    assert result.returncode == EXIT_DATA_ERROR
    assert result.stdout == ""
    assert "no Ray cluster at 127.0.0.1:" in one_error_line(result.stderr)
    assert elapsed_s < baseline_s + 5


def test_auth_token_creates_an_owner_only_token_in_a_fresh_home_and_keeps_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    unset = {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"}
    env = {key: value for key, value in os.environ.items() if key not in unset} | {"HOME": str(home)}
    first = run_cli("auth-token", env=env)
    token = home / ".ray" / "auth_token"
    assert (first.returncode, first.stderr) == (EXIT_OK, "")
    assert first.stdout == f"Ray's auth token: {token} (readable by its owner only)\n"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    created = token.read_text(encoding="ascii")
    again = run_cli("auth-token", env=env)
    assert (again.returncode, again.stdout) == (EXIT_OK, first.stdout)
    assert token.read_text(encoding="ascii") == created


def run_cli_in(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A command in a subprocess whose TMPDIR (where `raybroker start` records its head) is `state_dir`, without
    RAY_ADDRESS."""
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"} | {"TMPDIR": str(state_dir)}
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_a_recorded_head_or_an_address_a_command_refuses_to_guess_a_cluster(tmp_path: Path) -> None:
    result = run_cli_in(tmp_path, "topics", "--list")
    assert result.returncode == EXIT_DATA_ERROR
    assert result.stdout == ""
    assert one_error_line(result.stderr) == (
        "raybroker: error: no raybroker head recorded here; start one with `raybroker start` or name the "
        "cluster with --address\n"
    )


def test_without_an_address_a_command_uses_the_recorded_head_even_when_it_is_down(tmp_path: Path) -> None:
    port = closed_port()
    body = {"started_head": True, "address": f"127.0.0.1:{port}", "session_name": "s", "node_id": "n"}
    state = tmp_path / f"raybroker-{os.getuid()}" / "cli-state.json"
    state.parent.mkdir()
    state.write_text(json.dumps({**body, "token_auth": False}), encoding="utf-8")
    result = run_cli_in(tmp_path, "topics", "--list")
    assert result.returncode == EXIT_DATA_ERROR
    assert f"no Ray cluster at 127.0.0.1:{port} " in one_error_line(result.stderr)


def test_stop_without_a_target_refuses_rather_than_pick_any_local_cluster(tmp_path: Path) -> None:
    # TMPDIR points `stop` at an empty state dir: no head of `raybroker start` is recorded there.
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"} | {"TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "stop"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == EXIT_USAGE
    assert result.stdout == ""
    assert "name the cluster whose broker to stop with --address" in one_error_line(result.stderr)


# --- against a running broker ----------------------------------------------------------------------------


def ray_node_ids() -> list[str]:
    return [node["NodeID"] for node in ray.nodes() if node["Alive"]]


@pytest.fixture(scope="module")
def broker(start_test_broker: StartBroker) -> tuple[Any, list[Path]]:
    return start_test_broker(log_dirs_count=2)


@pytest.mark.ray
def test_topics_create_list_describe_alter_delete(
    broker: tuple[Any, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, log_dirs = broker
    assert run(capsys, "topics", "--create", "--topic", "cli-t", "--partitions", "2", "--config", "retention.ms=60000")[
        :2
    ] == (EXIT_OK, "Created topic cli-t.\n")

    code, out, _ = run(capsys, "topics", "--list")
    assert code == EXIT_OK
    assert {"cli-t", "__consumer_offsets"} <= set(out.split())
    assert "__consumer_offsets" not in run(capsys, "topics", "--list", "--exclude-internal")[1]

    code, out, _ = run(capsys, "topics", "--describe", "--topic", "cli-t")
    lines = out.splitlines()
    assert code == EXIT_OK
    topic_line = re.fullmatch(
        r"Topic: cli-t\tTopicId: ([A-Za-z0-9_-]{22})\tPartitionCount: 2\tReplicationFactor: 1"
        r"\tConfigs: retention.ms=60000",
        lines[0],
    )
    assert topic_line is not None, lines[0]
    (node,) = ray_node_ids()
    for partition, line in enumerate(lines[1:]):
        # kafka-topics' fields first, in its order; no listener runs here, so brokers go by their Ray node id.
        assert line.startswith(
            f"\tTopic: cli-t\tPartition: {partition}\tLeader: {node}\tReplicas: {node}\tIsr: {node}\t"
        )
        fields = dict(field.split(": ", 1) for field in line.strip("\t").split("\t"))
        assert fields["Node"] == node
        assert fields["LogDir"] in {str(d) for d in log_dirs}
        assert (fields["LogStartOffset"], fields["LogEndOffset"], fields["Segments"]) == ("0", "0", "1")
    assert len(lines) == 3
    for only in ("--under-replicated-partitions", "--unavailable-partitions"):
        assert run(capsys, "topics", "--describe", "--topic", "cli-t", only)[:2] == (EXIT_OK, "")

    assert run(
        capsys, "topics", "--alter", "--topic", "cli-t", "--partitions", "3", "--config", "segment.bytes=1048576"
    )[:2] == (EXIT_OK, "")
    lines = run(capsys, "topics", "--describe", "--topic", "cli-t")[1].splitlines()
    assert lines[0] == (
        f"Topic: cli-t\tTopicId: {topic_line[1]}\tPartitionCount: 3\tReplicationFactor: 1"
        "\tConfigs: retention.ms=60000,segment.bytes=1048576"
    )
    assert len(lines) == 4

    code, _, err = run(capsys, "topics", "--create", "--topic", "cli-t")
    assert code == EXIT_DATA_ERROR
    assert "already exists" in one_error_line(err)
    assert run(capsys, "topics", "--create", "--topic", "cli-t", "--if-not-exists")[0] == EXIT_OK

    assert run(capsys, "topics", "--delete", "--topic", "cli-t")[0] == EXIT_OK
    assert "cli-t" not in run(capsys, "topics", "--list")[1].split()
    code, out, err = run(capsys, "topics", "--describe", "--topic", "cli-t")
    assert (code, out) == (EXIT_DATA_ERROR, "")
    assert "unknown topic 'cli-t'" in one_error_line(err)
    assert run(capsys, "topics", "--delete", "--topic", "cli-t", "--if-exists")[0] == EXIT_OK


@pytest.mark.ray
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topics", "--create", "--topic", "bad/name"], "invalid topic name 'bad/name'"),
        (["topics", "--create", "--topic", "cli-badcfg", "--config", "no.such.config=1"], "no.such.config"),
        (["topics", "--create", "--topic", "cli-badcfg", "--config", "retention.ms=soon"], "retention.ms"),
        (["consume", "--topic", "cli-missing", "--max-messages", "1"], "unknown topic 'cli-missing'"),
        (["produce", "--topic", "cli-missing"], "unknown topic 'cli-missing'"),
        (["get-offsets", "--topic", "cli-missing"], "unknown topic 'cli-missing'"),
        (["delete-records", "--topic", "cli-missing", "--partition", "0", "--offset", "0"], "cli-missing"),
        (["topics", "--alter", "--topic", "cli-missing", "--partitions", "2"], "unknown topic 'cli-missing'"),
        (
            ["topics", "--create", "--topic", "cli-badcfg", "--replication-factor", "2"],
            "replication factor 2 is larger",
        ),
    ],
)
def test_broker_refusals_are_one_line_and_exit_1(
    broker: tuple[Any, list[Path]],
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed_stdin(monkeypatch, "a line\n")
    code, out, err = run(capsys, *argv)
    assert code == EXIT_DATA_ERROR
    assert out == ""
    assert message in one_error_line(err)
    assert "cli-badcfg" not in run(capsys, "topics", "--list")[1].split()


@pytest.fixture(scope="module")
def keyed_topic(broker: tuple[Any, list[Path]]) -> list[str]:
    """A 2-partition topic filled through `raybroker produce --key-separator :`; returns the lines sent."""
    lines = [f"key{i % 5}:value {i}" for i in range(40)]
    assert main(["topics", "--create", "--topic", "cli-keyed", "--partitions", "2"]) == EXIT_OK
    stdin = sys.stdin
    try:
        sys.stdin = io.StringIO("".join(f"{line}\n" for line in lines))
        assert main(["produce", "--topic", "cli-keyed", "--key-separator", ":", "--compression", "lz4"]) == EXIT_OK
    finally:
        sys.stdin = stdin
    return lines


@pytest.mark.ray
def test_consume_from_beginning_prints_back_exactly_the_lines_produced(
    keyed_topic: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    code, out, err = run(
        capsys, "consume", "--topic", "cli-keyed", "--from-beginning", "--max-messages", "40", "--print-key",
        "--print-offset", "--print-partition", "--key-separator", ":",
    )  # fmt: skip
    assert code == EXIT_OK
    assert err == "Processed a total of 40 messages\n"
    rows = [line.split(":", 5) for line in out.splitlines()]
    assert sorted(f"{key}:{value}" for *_, key, value in rows) == sorted(keyed_topic)
    by_partition: dict[int, list[tuple[int, str]]] = {}
    for _, partition, _, offset, key, value in rows:
        by_partition.setdefault(int(partition), []).append((int(offset), f"{key}:{value}"))
    sent_order = {line: index for index, line in enumerate(keyed_topic)}
    for records in by_partition.values():
        assert [offset for offset, _ in records] == list(range(len(records)))
        # One key always lands in one partition, and each partition keeps the order of the input lines.
        assert [sent_order[line] for _, line in records] == sorted(sent_order[line] for _, line in records)
    partition_of_key: dict[str, str] = {}
    for _, partition, _, _, key, _ in rows:
        assert partition_of_key.setdefault(key, partition) == partition


@pytest.mark.ray
def test_consume_one_partition_from_an_offset(keyed_topic: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "consume", "--topic", "cli-keyed", "--partition", "0", "--offset", "2", "--max-messages", "2",
        "--print-offset", "--print-timestamp",
    )  # fmt: skip
    assert code == EXIT_OK
    rows = [line.split("\t") for line in out.splitlines()]
    assert [row[1] for row in rows] == ["Offset:2", "Offset:3"]
    assert all(row[0].startswith("CreateTime:") and row[2].startswith("value ") for row in rows)


@pytest.mark.ray
def test_consume_with_timeout_exits_when_idle(keyed_topic: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code, out, err = run(capsys, "consume", "--topic", "cli-keyed", "--timeout-ms", "300")
    assert (code, out, err) == (EXIT_OK, "", "Processed a total of 0 messages\n")
    assert time.monotonic() - started < 5


@pytest.mark.ray
def test_ctrl_c_ends_a_subprocess_consumer_quietly_with_130(keyed_topic: list[str]) -> None:

    # The subprocess inherits this process's RAY_AUTH_MODE, which the test session's Ray set.
    address = ray.get_runtime_context().gcs_address
    command = [sys.executable, "-m", "cluster.cli.main", "consume", "--topic", "cli-keyed", "--from-beginning"]
    # Ray's core prints a line of its own when RAY_BACKEND_LOG_LEVEL is set (the Spark session sets it).
    env = {key: value for key, value in os.environ.items() if key != "RAY_BACKEND_LOG_LEVEL"}
    consumer = subprocess.Popen(
        [*command, "--address", address],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert consumer.stdout is not None
        first = consumer.stdout.readline()
        consumer.send_signal(signal.SIGINT)
        _, err = consumer.communicate(timeout=30)
    finally:
        if consumer.poll() is None:
            consumer.kill()
    assert first.startswith("value ")
    assert consumer.returncode == EXIT_INTERRUPTED
    # The pipe reader buffered more lines than `first`, so only the form of the count is checked.
    assert re.fullmatch(r"Processed a total of [0-9]+ messages\n", err), err


@pytest.fixture(scope="module")
def timed_topic(broker: tuple[Any, list[Path]]) -> int:
    """A 1-partition topic with 6 records at base, base+10, ..., base+50 ms; returns base."""
    from actors import Producer

    base_ms = int(time.time() * 1000) - 60_000
    assert main(["topics", "--create", "--topic", "cli-timed", "--partitions", "1"]) == EXIT_OK
    with Producer() as producer:
        for i in range(6):
            producer.send("cli-timed", value=f"v{i}".encode(), key=f"k{i}".encode(), timestamp_ms=base_ms + 10 * i)
    return base_ms


@pytest.mark.ray
def test_a_group_commits_what_it_printed_and_the_next_run_continues(
    timed_topic: int, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(capsys, "consume", "--topic", "cli-timed", "--group", "g1", "--from-beginning", "--max-messages", "4")
    second = run(capsys, "consume", "--topic", "cli-timed", "--group", "g1", "--timeout-ms", "500", "--print-offset")
    assert first[:2] == (EXIT_OK, "v0\nv1\nv2\nv3\n")
    assert second[:2] == (EXIT_OK, "Offset:4\tv4\nOffset:5\tv5\n")
    # Without --from-beginning a new group starts at the end.
    assert run(capsys, "consume", "--topic", "cli-timed", "--group", "g2", "--timeout-ms", "300")[:2] == (EXIT_OK, "")


@pytest.mark.ray
@pytest.mark.parametrize(
    ("time_spec", "expected"),
    [
        ("earliest", "cli-timed:0:0\n"),
        ("-2", "cli-timed:0:0\n"),
        ("latest", "cli-timed:0:6\n"),
        ("max-timestamp", "cli-timed:0:5\n"),
        (25, "cli-timed:0:3\n"),
        (20, "cli-timed:0:2\n"),
        (10_000, ""),
    ],
)
def test_get_offsets_prints_topic_partition_offset(
    timed_topic: int, time_spec: str | int, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = str(timed_topic + time_spec) if isinstance(time_spec, int) else time_spec
    assert run(capsys, "get-offsets", "--topic", "cli-timed", "--time", spec)[:2] == (EXIT_OK, expected)


@pytest.mark.ray
def test_get_offsets_of_every_topic_and_of_no_matching_partition(
    timed_topic: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "get-offsets", "--exclude-internal-topics")
    assert code == EXIT_OK
    assert "cli-timed:0:6" in out.splitlines()
    assert "__consumer_offsets" not in out
    code, _, err = run(capsys, "get-offsets", "--topic", "cli-timed", "--partitions", "7")
    assert code == EXIT_DATA_ERROR
    assert "no topic partition matches" in one_error_line(err)


@pytest.mark.ray
def test_delete_records_moves_the_start_and_consumers_begin_there(
    broker: tuple[Any, list[Path]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["topics", "--create", "--topic", "cli-trim"]) == EXIT_OK
    feed_stdin(monkeypatch, "k0 v0\nk1 v1\nk2 v2\nk3 v3\n")
    assert main(["produce", "--topic", "cli-trim", "--key-separator", " "]) == EXIT_OK
    capsys.readouterr()

    code, out, _ = run(capsys, "delete-records", "--topic", "cli-trim", "--partition", "0", "--offset", "2")
    assert code == EXIT_OK
    assert out == "Records delete operation completed:\npartition: cli-trim-0\tlow_watermark: 2\n"
    assert run(capsys, "get-offsets", "--topic", "cli-trim", "--time", "earliest")[1] == "cli-trim:0:2\n"
    code, out, _ = run(
        capsys, "consume", "--topic", "cli-trim", "--from-beginning", "--max-messages", "1", "--print-offset",
        "--print-key",
    )  # fmt: skip
    assert (code, out) == (EXIT_OK, "Offset:2\tk2\tv2\n")

    code, _, err = run(capsys, "delete-records", "--topic", "cli-trim", "--partition", "0", "--offset", "99")
    assert code == EXIT_DATA_ERROR
    assert "past the high watermark 4" in one_error_line(err)
    code, _, err = run(capsys, "delete-records", "--topic", "cli-trim", "--partition", "3", "--offset", "0")
    assert code == EXIT_DATA_ERROR
    assert "partitions 0..0, not 3" in one_error_line(err)
    code, out, _ = run(capsys, "delete-records", "--topic", "cli-trim", "--partition", "0", "--offset", "-1")
    assert (code, out.splitlines()[-1]) == (EXIT_OK, "partition: cli-trim-0\tlow_watermark: 4")


@pytest.mark.ray
def test_produce_reads_raw_bytes_and_consume_shows_them_safely(
    timed_topic: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["topics", "--create", "--topic", "cli-bytes"]) == EXIT_OK
    raw = b"plain\r\nbad \xff byte\n\nlast line without newline"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
    code, _, err = run(capsys, "produce", "--topic", "cli-bytes", "--partition", "0")
    assert (code, err) == (EXIT_OK, "Produced 4 records to cli-bytes.\n")
    code, out, _ = run(capsys, "consume", "--topic", "cli-bytes", "--from-beginning", "--max-messages", "4")
    assert out.splitlines() == ["plain", "bad \\xff byte", "", "last line without newline"]


@pytest.mark.ray
def test_produce_stops_at_a_line_without_the_key_separator(
    timed_topic: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["topics", "--create", "--topic", "cli-sep"]) == EXIT_OK
    feed_stdin(monkeypatch, "a=1\nb=2\nno separator here\nc=3\n")
    code, _, err = run(capsys, "produce", "--topic", "cli-sep", "--key-separator", "=")
    assert code == EXIT_DATA_ERROR
    assert "line 3: no key separator '=' found" in one_error_line(err)
    # The lines before it were sent, as kafka-console-producer would have.
    code, out, _ = run(
        capsys, "consume", "--topic", "cli-sep", "--from-beginning", "--timeout-ms", "500", "--print-key"
    )
    assert out == "a\t1\nb\t2\n"


@pytest.mark.ray
def test_stop_then_start_on_the_running_cluster(
    broker: tuple[Any, list[Path]],
    timed_topic: int,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`stop` shuts the module's broker down cleanly and leaves a Ray it did not start alone; `start --address`
    starts a broker on that Ray again. Stops the broker the tests above share, so it comes after them."""

    from tests.conftest import FAST_BROKER_PROPERTIES

    _, log_dirs = broker
    capsys.readouterr()
    code, out, _ = run(capsys, "stop")
    assert code == EXIT_OK
    assert out.startswith("Broker stopped cleanly")
    assert "    cli-timed-0\t6" in out.splitlines()
    assert "Ray head" not in out
    assert all((log_dir / ".kafka_cleanshutdown").is_file() for log_dir in log_dirs)
    assert ray.is_initialized()

    code, _, err = run(capsys, "topics", "--list")
    assert code == EXIT_DATA_ERROR
    assert "is the broker running?" in one_error_line(err)

    # A relative log dir is made absolute here: the broker's actors do not run in this directory.
    monkeypatch.chdir(tmp_path)
    port = free_port()
    overrides = [arg for key, value in FAST_BROKER_PROPERTIES.items() for arg in ("--override", f"{key}={value}")]
    overrides += ["--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"]
    code, out, err = run(capsys, "start", "--address", "auto", "--log-dirs", "fresh", *overrides)
    assert code == EXIT_OK
    assert err == ""
    assert f"log dirs: {tmp_path / 'fresh'}\n" in out
    assert (tmp_path / "fresh" / "meta.properties").is_file()
    assert f'ray.init(address="{ray.get_runtime_context().gcs_address}")' in out
    assert f"Kafka clients: bootstrap.servers=127.0.0.1:{port} (1 listener process on this node)\n" in out
    node = next(n for n in ray.nodes() if n["NodeID"] == ray.get_runtime_context().get_node_id())
    metrics = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
    assert f"Prometheus metrics of this node: {metrics} (" in out
    assert run(capsys, "topics", "--list")[1] == "__consumer_offsets\n"
    # The listener started with the broker: a Kafka client produces and reads back through the printed port.
    assert wire_round_trip(f"127.0.0.1:{port}", "cli-wire") == [b"wire-0", b"wire-1", b"wire-2"]
    assert run(capsys, "get-offsets", "--topic", "cli-wire")[1] == "cli-wire:0:3\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wire_round_trip(bootstrap_servers: str, topic: str) -> list[bytes | None]:
    """Values a confluent-kafka producer sent to partition 0 of `topic`, as a confluent-kafka consumer reads them."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for index in range(3):
        producer.produce(topic, value=b"wire-%d" % index, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "unused"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        return [message.value() for message in consumer.consume(num_messages=3, timeout=30)]
    finally:
        consumer.close()


def test_start_refuses_a_bad_config_before_starting_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "start", "--log-dirs", str(tmp_path), "--override", "num.partitions=zero")
    assert code == EXIT_DATA_ERROR
    assert "num.partitions" in one_error_line(err)
    code, _, err = run(capsys, "start", "--log-dirs", str(tmp_path), "--redis-address", "no-port")
    assert code == EXIT_DATA_ERROR
    assert "a Redis address is HOST:PORT" in one_error_line(err)


def run_cli(
    *args: str, stdin: str | None = None, timeout_s: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", *args],
        cwd=REPO_ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
