"""`raybroker transactions --abort` on a real broker, as kafka-transactions.sh's `abort`: a hanging transaction (a
transactional batch whose coordinator never heard of it, written straight to the partition as a late write would
land) holds the partition's last stable offset back; aborting it by its start offset, or by its producer id, epoch
and coordinator epoch, writes an ABORT marker and releases the LSO, and read_committed readers then skip its records.
The oracle is the list of plain records written around the hanging ones. Bad input gets one error line and a
non-zero exit."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from cluster.cli.main import EXIT_DATA_ERROR, EXIT_OK, EXIT_USAGE
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.cli.cli_support import one_error_line
from tests.cluster.cli.cli_support import run as run_cli

TOPIC = "hanging"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "transactions", *argv)


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == EXIT_OK
    assert "--abort" in out and "--start-offset" in out and "--coordinator-epoch" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--abort"], "--abort needs --topic and --partition"),
        (["--abort", "--topic", "t"], "--abort needs --topic and --partition"),
        (["--abort", "--topic", "t", "--partition", "0"], "--abort needs --start-offset"),
        (["--abort", "--topic", "t", "--partition", "0", "--producer-id", "1"], "--abort needs --start-offset"),
        (
            ["--abort", "--topic", "t", "--partition", "0", "--start-offset", "3", "--producer-epoch", "0"],
            "--abort takes --start-offset, or",
        ),
        (["--list", "--topic", "t"], "go with --abort"),
    ],
)
def test_bad_abort_arguments_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert message in one_error_line(err)


def append(topic: str, batch: bytes) -> int:
    from actors.calls import call
    from actors.server.partition_lookup import partition_actor

    info = call(partition_actor(topic, 0).append.remote(batch))
    return int(info.first_offset)


def plain(values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(None, value, timestamp=time.time_ns() // 1_000_000)
    return builder.build()


def hanging(producer_id: int, values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=3, base_sequence=0, is_transactional=True)
    for value in values:
        builder.append(None, value, timestamp=time.time_ns() // 1_000_000)
    return builder.build()


def committed_end_and_values(expected: int) -> tuple[int, list[bytes]]:
    """The partition's end for a read_committed reader (its LSO) and what that reader reads from offset 0."""
    from actors import Consumer

    with Consumer(isolation_level="read_committed", auto_offset_reset="earliest") as consumer:
        consumer.assign([(TOPIC, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            values += [record.value for record in consumer.poll(timeout_ms=200)]
        values += [record.value for record in consumer.poll(timeout_ms=300)]
        consumer.seek_to_end()
        return consumer.position((TOPIC, 0)), values


@pytest.mark.ray
def test_abort_releases_the_last_stable_offset_a_hanging_transaction_holds(
    start_test_broker: Callable[..., tuple[Any, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    from actors import Admin

    broker, _ = start_test_broker(log_dirs_count=1)
    Admin(broker).create_topic(TOPIC, 1)
    written: list[bytes] = []
    written += [b"p0", b"p1"]
    append(TOPIC, plain([b"p0", b"p1"]))
    first_start = append(TOPIC, hanging(9001, [b"h0", b"h1"]))
    second_start = append(TOPIC, hanging(9002, [b"g0"]))
    written += [b"p2"]
    end = append(TOPIC, plain([b"p2"])) + 1
    # Held at the first hanging transaction: nothing after it is readable at read_committed.
    assert committed_end_and_values(2) == (first_start, [b"p0", b"p1"])

    code, _, err = run(capsys, "--abort", "--topic", TOPIC, "--partition", "0", "--start-offset", str(first_start + 1))
    assert code == EXIT_DATA_ERROR
    assert f"open ones start at {first_start}, {second_start}" in one_error_line(err)
    code, _, err = run(capsys, "--abort", "--topic", "no-such-topic", "--partition", "0", "--start-offset", "0")
    assert code == EXIT_DATA_ERROR
    one_error_line(err)

    code, out, _ = run(capsys, "--abort", "--topic", TOPIC, "--partition", "0", "--start-offset", str(first_start))
    assert code == EXIT_OK
    assert "producer id 9001 (epoch 3" in out
    # Now held at the second one, one marker further on.
    assert committed_end_and_values(2) == (second_start, [b"p0", b"p1"])

    explicit = ["--producer-id", "9002", "--producer-epoch", "3", "--coordinator-epoch", "0"]
    code, out, _ = run(capsys, "--abort", "--topic", TOPIC, "--partition", "0", *explicit)
    assert code == EXIT_OK
    # Released: the log end (the two markers after the last plain record), and the aborted records are skipped.
    assert committed_end_and_values(len(written)) == (end + 2, written)
    # An older epoch than the producer's last marker is refused by the partition.
    stale = ["--producer-id", "9002", "--producer-epoch", "2", "--coordinator-epoch", "0"]
    code, _, err = run(capsys, "--abort", "--topic", TOPIC, "--partition", "0", *stale)
    assert code == EXIT_DATA_ERROR
    one_error_line(err)
