"""The nemesis checker on histories made by hand: a clean history passes, and each anomaly class is found exactly
where it was planted (and nothing else is reported)."""

from __future__ import annotations

from pathlib import Path

from tests.reliability.nemesis.checker import FinalState, PartitionLog, check
from tests.reliability.nemesis.history import History, longest_ack_gaps

IN, OUT = ("in", 0), ("out", 0)


def clean() -> tuple[History, FinalState]:
    """Writer w0 writes w0-0..2 to in-0 (offsets 0..2); transformer t reads them and commits t|w0-0|1, t|w0-1|1 in
    attempt 1, aborts t|w0-2|2 in attempt 2, commits t|w0-2|3 in attempt 3; a reader sees the committed outputs."""
    history = History()
    for n in range(3):
        history.add("w0", "send", topic="in", partition=0, value=f"w0-{n}")
        history.add("w0", "ack", topic="in", partition=0, value=f"w0-{n}", offset=n)
    for n in range(3):
        history.add("t", "read", topic="in", partition=0, offset=n, value=f"w0-{n}", isolation="read_committed")
    history.add("t", "txn", attempt=1, outcome="commit", inputs=["w0-0", "w0-1"], outputs=["t|w0-0|1", "t|w0-1|1"])
    history.add("t", "offsets", group="t", offsets={"in/0": 2})
    history.add("t", "txn", attempt=2, outcome="abort", inputs=["w0-2"], outputs=["t|w0-2|2"])
    history.add("t", "txn", attempt=3, outcome="commit", inputs=["w0-2"], outputs=["t|w0-2|3"])
    history.add("t", "offsets", group="t", offsets={"in/0": 3})
    history.add("r", "read", topic="out", partition=0, offset=0, value="t|w0-0|1", isolation="read_committed")
    history.add("r", "read", topic="out", partition=0, offset=5, value="t|w0-2|3", isolation="read_committed")
    final = FinalState(
        logs={
            IN: PartitionLog([(n, f"w0-{n}", True) for n in range(3)], 3, 3),
            # offsets 2 and 4 are markers (not records), 3 the aborted output
            OUT: PartitionLog(
                [(0, "t|w0-0|1", True), (1, "t|w0-1|1", True), (3, "t|w0-2|2", False), (5, "t|w0-2|3", True)], 7, 7
            ),
        },
        group_offsets={"t": {IN: 3}},
        open_transactions=[],
    )
    return history, final


def test_a_clean_history_has_no_anomaly() -> None:
    history, final = clean()
    anomalies = check(history, final, {"t": "in"})
    assert anomalies.ok, anomalies.report()


def test_a_lost_acknowledged_write_and_the_read_of_it_are_found() -> None:
    history, final = clean()
    # offset 2 of in-0 was truncated and rewritten by another value
    final.logs[IN] = PartitionLog([(0, "w0-0", True), (1, "w0-1", True), (2, "w1-0", True)], 3, 3)
    anomalies = check(history, final, {"t": "in"})
    assert anomalies.found["lost"] == [(IN, 2, "w0-2", "w1-0")]
    assert anomalies.found["truncated_read"] == [("t", IN, 2, "w0-2", ("w1-0", True), 3)]
    assert anomalies.found["eos_missing"] == [("t", "w1-0")]
    assert [example[:2] for example in anomalies.found["eos_phantom"]] == [("t", "w0-2")]


def test_duplicates_and_reordering_are_found() -> None:
    history, final = clean()
    history.add("w0", "send", topic="in", partition=0, value="w0-3")
    history.add("w0", "ack", topic="in", partition=0, value="w0-3", offset=1)
    final.logs[IN] = PartitionLog([(0, "w0-0", True), (1, "w0-3", True), (2, "w0-2", True), (3, "w0-1", True)], 4, 4)
    anomalies = check(history, final)
    assert ("w0", "in", 0, [(2, 2), (3, 1)]) in anomalies.found["reordered"]
    history2, final2 = clean()
    final2.logs[IN].records.append((3, "w0-1", True))
    assert check(history2, final2).found["duplicated"] == [("in", "w0-1", 2)]


def test_aborted_reads_and_torn_transactions_are_found() -> None:
    history, final = clean()
    history.add("r", "read", topic="out", partition=0, offset=3, value="t|w0-2|2", isolation="read_committed")
    final.logs[OUT].records[1] = (1, "t|w0-1|1", False)
    anomalies = check(history, final)
    assert anomalies.found["aborted_read"] == [("r", OUT, 3, "t|w0-2|2")]
    assert anomalies.found["torn_transaction"] == [("t", 1, "committed", 1, 2)]


def test_an_abandoned_transaction_left_visible_is_found() -> None:
    history, final = clean()
    history.add("x", "txn", attempt=1, outcome="abandoned", inputs=[], outputs=["x|0|1"])
    final.logs[OUT].records.append((9, "x|0|1", False))
    assert check(history, final).ok
    final.logs[OUT].records[-1] = (9, "x|0|1", True)
    assert check(history, final).found["torn_transaction"] == [("x", 1, "aborted", 1, 1)]


def test_exactly_once_duplicates_are_found() -> None:
    history, final = clean()
    final.logs[OUT].records.append((7, "t|w0-0|4", True))
    assert check(history, final, {"t": "in"}).found["eos_duplicated"] == [("t", "w0-0", 2)]


def test_lost_or_runaway_offsets_and_open_transactions_are_found() -> None:
    history, final = clean()
    final.group_offsets["t"][IN] = 2
    final.open_transactions = ["t"]
    final.logs[OUT].last_stable_offset = 5
    final.logs[OUT].divergent_replicas = ["n1"]
    anomalies = check(history, final)
    assert anomalies.found["offsets_lost"] == [("t", IN, 3, 2)]
    assert anomalies.found["open_transaction"] == ["t", (OUT, 5, 7)]
    assert anomalies.found["divergent_replicas"] == [(OUT, ["n1"])]
    final.group_offsets["t"][IN] = 9
    assert check(history, final).found["offsets_past_end"] == [("t", IN, 9, 3)]


def test_a_history_reads_back_from_its_file(tmp_path: Path) -> None:
    history, final = clean()
    history.write(tmp_path / "history.jsonl")
    again = History.read(tmp_path / "history.jsonl")
    assert again.events() == history.events()
    assert check(again, final, {"t": "in"}).ok


def test_a_transaction_of_unknown_outcome_is_all_or_nothing() -> None:
    history, final = clean()
    history.add("t", "txn", attempt=9, outcome="fail", inputs=["w0-0", "w0-1"], outputs=["t|w0-0|9", "t|w0-1|9"])
    final.logs[OUT].records.append((8, "t|w0-0|9", True))
    assert check(history, final).found["torn_transaction"] == [("t", 9, "in part", 1, 2)]


def test_the_longest_gap_between_acknowledgements_is_measured_per_writer() -> None:
    history = History(
        [
            {"time": t, "process": p, "type": "ack", "topic": "in", "partition": 0, "value": f"{p}-{n}", "offset": n}
            for n, (t, p) in enumerate([(1.0, "a"), (1.5, "a"), (4.0, "a"), (4.1, "a"), (2.0, "b"), (2.5, "b")])
        ]
    )
    assert longest_ack_gaps(history) == {"a": (2.5, 1.5), "b": (0.5, 2.0)}
