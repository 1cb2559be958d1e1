"""The checker of a nemesis run: what the clients were told and saw (`History`) against what the cluster holds at
the end (`FinalState`), in the classes of anomaly Jepsen's Kafka analyses name. Ray-free, so that its own tests run in
the fast tier on histories made by hand.

- `lost`: an acknowledged (acks=all) record that the final log does not hold at its acknowledged offset;
- `duplicated`: a value an idempotent producer sent once, held at two offsets of the final log;
- `reordered`: a producer's acknowledged records of one partition whose offsets do not follow its send order;
- `truncated_read`: a read_committed read of (partition, offset) that the final log does not hold there: a read of
  data later truncated;
- `aborted_read`: a read_committed read of a record of an aborted transaction;
- `torn_transaction`: a transaction whose outputs the final read_committed view holds only in part, or a committed
  one missing, or an aborted (or abandoned: left open by its client) one visible;
- `eos_missing`, `eos_duplicated`, `eos_phantom`: a consume-transform-produce transformer's committed outputs against
  the final input log: an input without output, with two, or an output of an input the input log does not hold;
- `offsets_past_end`, `offsets_lost`: a group's committed offset past its partition's final high watermark, or below
  the offset the group was last told it committed;
- `open_transaction`: a transaction still open at the end (the coordinator lists it, or a partition's last stable
  offset is short of its high watermark);
- `divergent_replicas`: replicas of one partition that differ below the high watermark.

Records are named by value: every workload writes values unique in the run, `<process>-<n>` for a producer and
`<transformer>|<input>|<attempt>` for a transformer's output.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.reliability.nemesis.history import History

TopicPartition = tuple[str, int]


@dataclass
class PartitionLog:
    """A partition at the end, from its leader: every data record below the high watermark as (offset, value,
    visible to read_committed), the high watermark and the last stable offset, and the replicas that differ from
    the leader below it (empty when they agree)."""

    records: list[tuple[int, str, bool]]
    high_watermark: int
    last_stable_offset: int
    divergent_replicas: list[str] = field(default_factory=list)

    def at(self) -> dict[int, str]:
        return {offset: value for offset, value, _ in self.records}


@dataclass
class FinalState:
    """The cluster at the end of a run."""

    logs: dict[TopicPartition, PartitionLog]
    group_offsets: dict[str, dict[TopicPartition, int]]
    open_transactions: list[str]


@dataclass
class Anomalies:
    """The anomalies found, by class (see the module docstring), each with examples."""

    found: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, example: Any) -> None:
        self.found[kind].append(example)

    @property
    def ok(self) -> bool:
        return not any(self.found.values())

    def counts(self) -> dict[str, int]:
        return {kind: len(examples) for kind, examples in sorted(self.found.items()) if examples}

    def report(self, examples: int = 5) -> str:
        lines = [
            f"{kind}: {len(found)}, e.g. {found[:examples]}" for kind, found in sorted(self.found.items()) if found
        ]
        return "\n".join(lines) or "no anomaly"


def _key(event: dict[str, Any]) -> TopicPartition:
    return (event["topic"], int(event["partition"]))


def _sequence(value: str) -> int:
    return int(value.rsplit("-", 1)[1])


def check(history: History, final: FinalState, transformed: dict[str, str] | None = None) -> Anomalies:
    """Every anomaly of the module docstring in `history` against `final`. `transformed` maps each transformer's
    name to the input topic it reads (empty: no consume-transform-produce workload)."""
    anomalies = Anomalies()
    _check_writes(history, final, anomalies)
    _check_reads(history, final, anomalies)
    _check_transactions(history, final, anomalies)
    for transformer, source in (transformed or {}).items():
        _check_exactly_once(history, final, transformer, source, anomalies)
    _check_offsets(history, final, anomalies)
    _check_end(final, anomalies)
    return anomalies


def _check_writes(history: History, final: FinalState, anomalies: Anomalies) -> None:
    at = {tp: log.at() for tp, log in final.logs.items()}
    acked_by: dict[tuple[str, str, int], list[tuple[int, int]]] = defaultdict(list)
    written: set[tuple[str, str]] = set()
    for event in history.events("ack"):
        tp = _key(event)
        value, offset = event["value"], int(event["offset"])
        written.add((tp[0], value))
        held = at.get(tp, {}).get(offset)
        if held != value:
            anomalies.add("lost", (tp, offset, value, held))
        acked_by[(event["process"], *tp)].append((_sequence(value), offset))
    for (process, topic, partition), acks in acked_by.items():
        offsets = [offset for _, offset in sorted(acks)]
        if offsets != sorted(offsets):
            first = next(i for i in range(1, len(offsets)) if offsets[i] < offsets[i - 1])
            anomalies.add("reordered", (process, topic, partition, sorted(acks)[first - 1 : first + 1]))
    sent_topics = {event["topic"] for event in history.events("send")}
    for topic in sent_topics:
        counts = Counter(value for (t, _), log in final.logs.items() if t == topic for _, value, _ in log.records)
        for value, count in counts.items():
            if count > 1:
                anomalies.add("duplicated", (topic, value, count))


def _check_reads(history: History, final: FinalState, anomalies: Anomalies) -> None:
    logs = {tp: {offset: (value, visible) for offset, value, visible in log.records} for tp, log in final.logs.items()}
    for event in history.events("read"):
        if event["isolation"] != "read_committed":
            continue
        tp, offset, value = _key(event), int(event["offset"]), event["value"]
        held = logs.get(tp, {}).get(offset)
        if held is None or held[0] != value:
            # The final high watermark beside it tells a read past the final log's end from one of replaced data.
            final_high_watermark = final.logs[tp].high_watermark if tp in final.logs else None
            anomalies.add("truncated_read", (event["process"], tp, offset, value, held, final_high_watermark))
        elif not held[1]:
            anomalies.add("aborted_read", (event["process"], tp, offset, value))


def _visible_outputs(final: FinalState) -> Counter[str]:
    return Counter(value for log in final.logs.values() for _, value, visible in log.records if visible)


def _check_transactions(history: History, final: FinalState, anomalies: Anomalies) -> None:
    visible = _visible_outputs(final)
    for event in history.events("txn"):
        outputs = event["outputs"]
        seen = [output for output in outputs if visible[output]]
        outcome = event["outcome"]
        if outcome == "commit" and len(seen) != len(outputs):
            anomalies.add(
                "torn_transaction", (event["process"], event["attempt"], "committed", len(seen), len(outputs))
            )
        elif outcome in ("abort", "abandoned") and seen:
            anomalies.add("torn_transaction", (event["process"], event["attempt"], "aborted", len(seen), len(outputs)))
        elif outcome == "fail" and 0 < len(seen) < len(outputs):
            anomalies.add("torn_transaction", (event["process"], event["attempt"], "in part", len(seen), len(outputs)))


def _check_exactly_once(
    history: History, final: FinalState, transformer: str, source: str, anomalies: Anomalies
) -> None:
    inputs = Counter(value for (topic, _), log in final.logs.items() if topic == source for _, value, _ in log.records)
    prefix = f"{transformer}|"
    outputs = Counter(
        value[len(prefix) :].rsplit("|", 1)[0]
        for log in final.logs.values()
        for _, value, visible in log.records
        if visible and value.startswith(prefix)
    )
    for value in inputs:
        if outputs[value] == 0:
            anomalies.add("eos_missing", (transformer, value))
        elif outputs[value] > 1:
            anomalies.add("eos_duplicated", (transformer, value, outputs[value]))
    for value in outputs:
        if value not in inputs:
            reads = [
                (e["partition"], e["offset"])
                for e in history.events("read")
                if e["process"] == transformer and e["value"] == value
            ]
            anomalies.add("eos_phantom", (transformer, value, reads[:3]))


def _check_offsets(history: History, final: FinalState, anomalies: Anomalies) -> None:
    last_told: dict[tuple[str, TopicPartition], int] = {}
    for event in history.events("offsets"):
        for name, offset in event["offsets"].items():
            topic, partition = name.rsplit("/", 1)
            last_told[(event["group"], (topic, int(partition)))] = int(offset)
    for group, offsets in final.group_offsets.items():
        for tp, offset in offsets.items():
            log = final.logs.get(tp)
            if log is not None and offset > log.high_watermark:
                anomalies.add("offsets_past_end", (group, tp, offset, log.high_watermark))
    for (group, tp), offset in last_told.items():
        held = final.group_offsets.get(group, {}).get(tp)
        if held is None or held < offset:
            anomalies.add("offsets_lost", (group, tp, offset, held))


def _check_end(final: FinalState, anomalies: Anomalies) -> None:
    for transactional_id in final.open_transactions:
        anomalies.add("open_transaction", transactional_id)
    for tp, log in sorted(final.logs.items()):
        if log.last_stable_offset < log.high_watermark:
            anomalies.add("open_transaction", (tp, log.last_stable_offset, log.high_watermark))
        if log.divergent_replicas:
            anomalies.add("divergent_replicas", (tp, log.divergent_replicas))
