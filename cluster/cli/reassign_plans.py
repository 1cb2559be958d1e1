"""The files and lines of kafka-reassign-partitions.sh, without a cluster: its JSON files read and checked as Kafka's
tool checks them, and the assignments and move states written as it prints them (`cluster.cli.reassign_command`
runs the actions).

- A topics file: `{"version": 1, "topics": [{"topic": "a"}, ...]}` (`--generate`'s input).
- A reassignment file: `{"version": 1, "partitions": [{"topic": "a", "partition": 0, "replicas": [1, 2],
  "log_dirs": ["any", "any"]}, ...]}`. `log_dirs` is optional; raybroker takes only "any" there (a replica's move
  between the log dirs of its broker is not supported) and refuses a file naming a log dir.
- Brokers are Kafka `node.id`s (ints); a broker whose node runs no Kafka listener has none and is named by its Ray
  node id (a string) instead, in the files read and in the lines written.

Every refusal is a `PlanError` whose message is the one Kafka's tool gives for the same file.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from storage.arguments import is_int

# A broker as the files and lines name it: its Kafka node.id, or its Ray node id when it has none.
BrokerName = int | str
Assignment = dict[tuple[str, int], tuple[BrokerName, ...]]
ANY_LOG_DIR = "any"
# The only version of either file Kafka's tool reads (also what a file without "version" is taken as).
VERSION = 1


class PlanError(Exception):
    """A file or broker list refused, before anything is changed."""


def read_json(text: str, what: str) -> dict[str, object]:
    """The JSON object of a file's `text`; `PlanError` for anything else."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"the {what} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise PlanError(f"the {what} must hold a JSON object, not {type(parsed).__name__}")
    version = parsed.get("version", VERSION)
    if version != VERSION:
        raise PlanError(f"Not supported version field value {version}")
    return parsed


def parse_topics(text: str) -> list[str]:
    """The topics of a topics file (see the module docstring); `PlanError` if one is named twice."""
    parsed = read_json(text, "topics-to-move file")
    entries = parsed.get("topics", [])
    if not isinstance(entries, list) or not all(
        isinstance(entry, dict) and isinstance(entry.get("topic"), str) for entry in entries
    ):
        raise PlanError('"topics" must be a list of objects, each with a "topic" string')
    topics = [entry["topic"] for entry in entries]
    duplicated = sorted(topic for topic, count in Counter(topics).items() if count > 1)
    if duplicated:
        raise PlanError(f"List of topics to reassign contains duplicate entries: [{', '.join(duplicated)}]")
    return topics


def parse_broker_list(text: str) -> list[BrokerName]:
    """`--broker-list` ("1,2,3"; a Ray node id where a broker has no node.id); `PlanError` for a duplicate."""
    brokers = [broker_name(part.strip()) for part in text.split(",") if part.strip()]
    if not brokers:
        raise PlanError("--broker-list names no broker")
    duplicated = sorted({str(broker) for broker, count in Counter(brokers).items() if count > 1})
    if duplicated:
        raise PlanError(f"Broker list contains duplicate entries: [{', '.join(duplicated)}]")
    return brokers


def broker_name(text: str) -> BrokerName:
    """A broker as typed: a node.id if it is an integer, else a Ray node id."""
    try:
        return int(text)
    except ValueError:
        return text


def parse_reassignment(text: str) -> Assignment:
    """The target replicas of each partition of a reassignment file, in file order; `PlanError` for an empty
    plan, an empty or repeated replica list, a partition named twice, or a log dir other than "any"."""
    parsed = read_json(text, "reassignment file")
    entries = parsed.get("partitions", [])
    if not isinstance(entries, list):
        raise PlanError('"partitions" must be a list')
    planned: list[tuple[tuple[str, int], tuple[BrokerName, ...]]] = []
    for entry in entries:
        planned.append(_planned_partition(entry))
    if not planned:
        raise PlanError("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in planned):
        raise PlanError("Partition replica list cannot be empty")
    repeated = sorted(key for key, count in Counter(key for key, _ in planned).items() if count > 1)
    if repeated:
        named = ",".join(partition_name(key) for key in repeated)
        raise PlanError(f"Partition reassignment contains duplicate topic partitions: {named}")
    twice = [
        f"{partition_name(key)} contains multiple entries for "
        + ",".join(str(broker) for broker, count in Counter(replicas).items() if count > 1)
        for key, replicas in planned
        if len(set(replicas)) < len(replicas)
    ]
    if twice:
        raise PlanError(f"Partition replica lists may not contain duplicate entries: {'. '.join(twice)}")
    return dict(planned)


def _planned_partition(entry: object) -> tuple[tuple[str, int], tuple[BrokerName, ...]]:
    if not isinstance(entry, dict):
        raise PlanError('each entry of "partitions" must be an object')
    topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
    if not isinstance(topic, str) or not is_int(partition):
        raise PlanError('each entry of "partitions" needs a "topic" string and a "partition" integer')
    if not isinstance(replicas, list) or not all(is_int(r) or isinstance(r, str) for r in replicas):
        raise PlanError(f'"replicas" of {topic}-{partition} must be a list of broker ids')
    log_dirs = entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
    if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
        raise PlanError(
            f"Size of replicas list {_java_list(replicas)} is different from size of log dirs list "
            f"{_java_list(log_dirs if isinstance(log_dirs, list) else [log_dirs])} for partition {topic}-{partition}"
        )
    if any(log_dir != ANY_LOG_DIR for log_dir in log_dirs):
        raise PlanError(
            f"{topic}-{partition}: moving a replica between the log dirs of its broker is not supported; "
            f'give "{ANY_LOG_DIR}" as each log dir'
        )
    return (topic, partition), tuple(replicas)


def partition_name(key: tuple[str, int]) -> str:
    """`topic-partition`, as Kafka's `TopicPartition` prints."""
    return f"{key[0]}-{key[1]}"


def reassignment_json(assignment: Mapping[tuple[str, int], Sequence[BrokerName]]) -> str:
    """A reassignment file of `assignment`, sorted by topic then partition, every log dir "any": the compact JSON
    Kafka's tool prints (its `formatAsReassignmentJson`)."""
    partitions = [
        {"topic": topic, "partition": partition, "replicas": list(replicas), "log_dirs": [ANY_LOG_DIR] * len(replicas)}
        for (topic, partition), replicas in sorted(assignment.items())
    ]
    return json.dumps({"version": VERSION, "partitions": partitions}, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Move:
    """A partition being moved, as ListPartitionReassignments gives it: every replica it has now, those being
    added and those being removed."""

    replicas: tuple[BrokerName, ...]
    adding: tuple[BrokerName, ...] = ()
    removing: tuple[BrokerName, ...] = ()


def list_lines(moves: Mapping[tuple[str, int], Move]) -> list[str]:
    """`--list`'s lines: each move in progress, or that there is none."""
    if not moves:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for key, move in sorted(moves.items()):
        line = f"{partition_name(key)}: replicas: {_ids(move.replicas)}."
        if move.adding:
            line += f" adding: {_ids(move.adding)}."
        if move.removing:
            line += f" removing: {_ids(move.removing)}."
        lines.append(line)
    return lines


def verify_lines(
    plan: Mapping[tuple[str, int], Sequence[BrokerName]],
    moves: Mapping[tuple[str, int], Move],
    current: Mapping[tuple[str, int], Sequence[BrokerName]],
) -> list[str]:
    """`--verify`'s lines: for each partition of `plan`, whether its move is in progress (in `moves`), completed
    (its `current` replicas are the planned ones, in order), or gone with other replicas."""
    lines = ["Status of partition reassignment:"]
    for key, target in sorted(plan.items()):
        name = partition_name(key)
        if key in moves:
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif tuple(current.get(key, ())) == tuple(target):
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{_ids(current.get(key, ()))} rather than {_ids(target)}."
            )
    return lines


@dataclass(frozen=True, slots=True)
class Throttles:
    """What `--execute --throttle` sets (Kafka's `calculateProposedMoveMap` and the lists it derives): per topic,
    the leader-side replicas (each moving partition's sources: its replicas before the move, or before the move
    under way) and the follower-side ones (the replicas it adds), as `partition:broker` lists; and every broker
    involved, whose leader and follower rates are set."""

    leader: dict[str, str]
    follower: dict[str, str]
    brokers: tuple[int, ...]


def reassignment_throttles(
    plan: Mapping[tuple[str, int], Sequence[BrokerName]],
    moves: Mapping[tuple[str, int], Move],
    current: Mapping[tuple[str, int], Sequence[BrokerName]],
) -> Throttles:
    """The throttles of `plan`, the moves under way (`moves`) counted as Kafka's tool counts them. Brokers without a
    Kafka node.id (named by their Ray node id) are left out: no throttled-replicas list can name them."""
    sources: dict[tuple[str, int], set[BrokerName]] = {}
    destinations: dict[tuple[str, int], set[BrokerName]] = {}
    for key, move in moves.items():
        sources[key] = set(move.replicas) - set(move.adding)
        destinations[key] = set(move.adding)
    for key, target in plan.items():
        source = sources.get(key, set(current.get(key, ())))
        sources[key] = source
        destinations[key] = set(target) - source
    leader: dict[str, set[str]] = {}
    follower: dict[str, set[str]] = {}
    brokers: set[int] = set()
    for (topic, partition), source in sources.items():
        leader.setdefault(topic, set()).update(f"{partition}:{b}" for b in source if is_int(b))
        follower.setdefault(topic, set()).update(
            f"{partition}:{b}" for b in destinations[(topic, partition)] if is_int(b)
        )
        brokers.update(b for b in source | destinations[(topic, partition)] if is_int(b))
    return Throttles(
        {topic: ",".join(sorted(items)) for topic, items in leader.items()},
        {topic: ",".join(sorted(items)) for topic, items in follower.items()},
        tuple(sorted(brokers)),
    )


def cancellable(moves: Mapping[tuple[str, int], Move], plan: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The partitions of `plan` whose move `--cancel` cancels: in progress, and removing a replica or adding none
    (Kafka's tool leaves a move that only adds replicas to go on)."""
    return sorted(key for key in plan if key in moves and (moves[key].removing or not moves[key].adding))


def _ids(brokers: Sequence[BrokerName]) -> str:
    return ",".join(str(broker) for broker in brokers)


def _java_list(values: Sequence[object]) -> str:
    """A list as Java prints one (`[1, 2]`), for the messages Kafka's tool words so."""
    return "[" + ", ".join(str(value) for value in values) + "]"
