"""The translation loop of a cluster: every topic whose `iceberg.mode` is not `off` translated into its table every
`iceberg.target.lag.ms`, and what each topic's translation is doing now.

A pass (`run_pass`, every `POLL_INTERVAL_S` from the actor's thread):
1. reads every topic's configs from the controller, so a topic created, altered (its mode, table, lag target) or
   deleted since the last pass is picked up; a topic no longer translated is forgotten;
2. for each translated topic whose time has come, runs one round (`cluster.iceberg.translation`: exactly once,
   whatever fails in the middle); then, and for the other topics, the last stable offsets are asked of the leaders,
   so that the lag stays current between rounds and while a topic is paused. A topic's next round is due
   `iceberg.target.lag.ms` after its last round began, less what the next round is expected to take
   (`ROUND_MARGIN` times the longest of its last rounds that translated records, and at least `MIN_ROUND_SHARE` of
   the target): a record that arrives just after a round began waits for the next round and then for its
   commit, so it lands within the target (rounds run back to back when they take longer than the target). After a
   round that found nothing, the wait runs from when new records are first seen (an idle topic is not translated
   every pass, and its first records wait no longer than later ones).

A round that fails pauses the topic's translation: a catalog or warehouse that cannot be reached (the catalog's
database or REST endpoint down, a warehouse folder not writable), a commit refused. The reason is logged once when
the topic pauses (not at every pass), shown in its status and counted (`iceberg_round_failed`); the round is tried
again when the topic is next due, and the log says when it resumes. The topic itself keeps serving: translation
only reads the log. Any error a round raises pauses it (not only `IcebergCatalogError`): pyiceberg, SQLAlchemy,
HTTP clients and a Ray task's `OSError` raise their own types, and one topic's failure must stop neither the loop
nor the other topics.

Lag is in offsets: a partition's last stable offset less the table's offset (aborted records and transaction
markers count until the table's offset passes them, as they do in a consumer's lag).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from pyiceberg.catalog import Catalog
from ray.exceptions import RayTaskError

from actors.calls import call
from actors.clients.broker import Broker
from actors.metrics.names import ICEBERG_LAG
from actors.metrics.recorder import NO_METRICS, BrokerMetrics, Sample
from cluster.iceberg.catalog import open_catalog
from cluster.iceberg.key_value_table import load_or_create_table
from cluster.iceberg.translation import commit_round, prepare_round
from cluster.iceberg.value_table import load_or_create_value_tables
from cluster.records.offset_ranges import partitions_of
from cluster.records.read_plan import snapshot_partitions
from storage.config.iceberg_topic_config import VALUE_MODES, table_identifier
from storage.config.log_config import LogConfig

logger = logging.getLogger(__name__)

# How often the loop wakes to read topic configs and run the rounds due: the shortest lag target it honours closely.
POLL_INTERVAL_S = 0.5
TRANSLATING = "translating"
PAUSED = "paused"
# A round starts this many times the longest duration of the topic's last `ROUNDS_REMEMBERED` rounds that translated
# records before its target lag runs out since the last round began: a record that arrived just after that round
# began then lands within the target also when the next round takes longer than the last (more records, a busier
# node).
ROUND_MARGIN = 1.5
ROUNDS_REMEMBERED = 5
# The least a topic's round is expected to take, as a share of its target lag (all it is expected to take before any
# round of it translated records): the remembered rounds may be far smaller than the next one (a round that caught
# the first few records of a burst, its next round the records of the whole wait after it).
MIN_ROUND_SHARE = 0.3
# A reason longer than this is cut: an HTTP client's error may carry a whole response body.
MAX_REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """One partition of a translated topic: the table's next offset to translate and the log's last stable offset
    when last asked. Until the driver's first round of the topic succeeds, the table could not be read, and its
    offset is taken as the log start offset."""

    partition: int
    table_offset: int
    last_stable_offset: int

    @property
    def lag(self) -> int:
        return max(self.last_stable_offset - self.table_offset, 0)


@dataclass(frozen=True, slots=True)
class TopicStatus:
    """What a translated topic's table holds and whether its translation runs (`translating`) or waits for its
    catalog or warehouse (`paused`, with the reason); its rounds (those with nothing new included), failed rounds
    and dead letters are counted since the driver started."""

    topic: str
    table: str
    mode: str
    state: str = TRANSLATING
    reason: str = ""
    snapshot_id: int | None = None
    partitions: tuple[PartitionStatus, ...] = ()
    rounds: int = 0
    rounds_failed: int = 0
    dead_letters: int = 0

    @property
    def lag(self) -> int:
        return sum(partition.lag for partition in self.partitions)


@dataclass
class _Topic:
    status: TopicStatus
    target_lag_s: float
    next_due_s: float = 0.0
    table_offsets: dict[int, int] = field(default_factory=dict)
    # The durations (s) of the last rounds that translated records, the newest last: what the next round is expected
    # to take.
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=ROUNDS_REMEMBERED))
    # Whether the last round found nothing to translate: the next records' wait then starts when they are seen.
    caught_up: bool = False


class TranslationDriver:
    """The loop's state and one pass of it (see the module docstring). Thread-safe: `status` is read while a pass
    runs."""

    def __init__(
        self,
        catalog_properties: Mapping[str, str],
        broker: Broker,
        *,
        clock: Callable[[], float] = time.monotonic,
        metrics: BrokerMetrics = NO_METRICS,
    ) -> None:
        self._catalog_properties = dict(catalog_properties)
        self._broker = broker
        self._clock = clock
        self._metrics = metrics
        self._catalog: Catalog | None = None
        self._lock = threading.Lock()
        self._topics: dict[str, _Topic] = {}
        metrics.add_gauges(self.lag_samples)

    def close(self) -> None:
        self._metrics.remove_gauges(self.lag_samples)

    def status(self, topic: str | None = None) -> list[TopicStatus]:
        """Every translated topic's status (or only `topic`'s), by topic name."""
        with self._lock:
            return [t.status for name, t in sorted(self._topics.items()) if topic is None or name == topic]

    def seconds_until_due(self) -> float:
        """How long until the next round of a topic is due (0 if one is; infinite with no topic translated): the loop
        wakes then rather than at its next poll, so a round starts on time."""
        with self._lock:
            due = min((entry.next_due_s for entry in self._topics.values()), default=float("inf"))
        return max(0.0, due - self._clock())

    def lag_samples(self) -> Iterable[Sample]:
        return [(ICEBERG_LAG, (status.topic,), float(status.lag)) for status in self.status()]

    def run_pass(self) -> None:
        """One pass (see the module docstring)."""
        configs = self._translated_topics()
        with self._lock:
            for gone in set(self._topics) - set(configs):
                del self._topics[gone]
        for topic, config in sorted(configs.items()):
            entry = self._entry(topic, config)
            now = self._clock()
            if now >= entry.next_due_s:
                moved = self._run_round(topic, config, entry)
                if moved:
                    entry.durations.append(self._clock() - now)
                entry.caught_up = moved is False
                entry.next_due_s = now + max(0.0, entry.target_lag_s - _expected_round_s(entry))
            else:
                self._refresh_offsets(topic, entry)
                if entry.caught_up and entry.status.lag > 0:
                    # Records came after a round that found none, within the last pass: their wait starts now.
                    entry.caught_up = False
                    due = now - POLL_INTERVAL_S + entry.target_lag_s - _expected_round_s(entry)
                    entry.next_due_s = min(entry.next_due_s, due)

    def _translated_topics(self) -> dict[str, LogConfig]:
        configs: dict[str, dict[str, str]] = call(self._broker.controller.topic_configs.remote())
        translated = {}
        for topic, properties in configs.items():
            if properties.get("iceberg.mode", "off") != "off":
                translated[topic] = LogConfig.from_properties(properties)
        return translated

    def _entry(self, topic: str, config: LogConfig) -> _Topic:
        table = ".".join(table_identifier(config.iceberg_table, topic))
        with self._lock:
            entry = self._topics.get(topic)
            if entry is None or entry.status.table != table or entry.status.mode != config.iceberg_mode:
                entry = self._topics[topic] = _Topic(TopicStatus(topic, table, config.iceberg_mode), 0.0)
            entry.target_lag_s = config.iceberg_target_lag_ms / 1000
            entry.next_due_s = min(entry.next_due_s, self._clock() + entry.target_lag_s)
            return entry

    def _run_round(self, topic: str, config: LogConfig, entry: _Topic) -> bool | None:
        """One round of the topic: whether it translated records (None: it failed and the topic paused)."""
        try:
            if self._catalog is None:
                self._catalog = open_catalog(self._catalog_properties)
            identifier = table_identifier(config.iceberg_table, topic)
            if config.iceberg_mode in VALUE_MODES:
                table, dead_letters, values = load_or_create_value_tables(
                    self._catalog,
                    identifier,
                    config.iceberg_mode,
                    config.iceberg_value_schema,
                    config.iceberg_partition_spec,
                )
                prepared = prepare_round(topic, table, self._broker, values, dead_letters)
                snapshot_id = commit_round(table, prepared, dead_letters)
            else:
                table = load_or_create_table(self._catalog, identifier, config.iceberg_partition_spec)
                prepared = prepare_round(topic, table, self._broker)
                snapshot_id = commit_round(table, prepared)
        except Exception as exc:  # Any failure pauses this topic only (see the module docstring).
            self._catalog = None
            self._paused(topic, entry, exc)
            self._refresh_offsets(topic, entry)
            return None
        if snapshot_id is not None:
            files = len(prepared.data_files) + len(prepared.dead_letter_files)
            self._metrics.iceberg_committed(topic, files, prepared.size_bytes, prepared.dead_letters)
        current = table.current_snapshot()
        entry.table_offsets = dict(prepared.end_offsets)
        if entry.status.state == PAUSED:
            logger.info("Iceberg translation of %s resumed", topic)
        self._update(
            entry,
            state=TRANSLATING,
            reason="",
            snapshot_id=None if current is None else current.snapshot_id,
            partitions=_partitions(entry.table_offsets, prepared.end_offsets),
            rounds=entry.status.rounds + 1,
            dead_letters=entry.status.dead_letters + prepared.dead_letters,
        )
        self._refresh_offsets(topic, entry)
        return prepared.advances

    def _paused(self, topic: str, entry: _Topic, exc: Exception) -> None:
        # A writer task's error reaches here wrapped in Ray's, whose first line names only the task.
        cause = exc.cause if isinstance(exc, RayTaskError) and isinstance(exc.cause, BaseException) else exc
        reason = f"{type(cause).__name__}: {cause}".strip().splitlines()[0][:MAX_REASON_CHARS]
        self._metrics.iceberg_round_failed(topic)
        if entry.status.state != PAUSED:
            logger.warning(
                "Iceberg translation of %s paused, tried again every iceberg.target.lag.ms: %s", topic, reason
            )
        self._update(entry, state=PAUSED, reason=reason, rounds_failed=entry.status.rounds_failed + 1)

    def _refresh_offsets(self, topic: str, entry: _Topic) -> None:
        """The topic's last stable offsets asked of its leaders; a leader that does not answer leaves them as
        they were (the next round will say what is wrong)."""
        try:
            snapshots = snapshot_partitions(self._broker, partitions_of(self._broker, [topic]))
        except Exception:  # A partition between leaders: the lag is refreshed at the next pass.
            return
        last_stable = {partition: snapshot.last_stable_offset for (_, partition), snapshot in snapshots.items()}
        starts = {partition: snapshot.log_start_offset for (_, partition), snapshot in snapshots.items()}
        offsets = {partition: entry.table_offsets.get(partition, starts[partition]) for partition in last_stable}
        self._update(entry, partitions=_partitions(offsets, last_stable))

    def _update(self, entry: _Topic, **changes: object) -> None:
        with self._lock:
            entry.status = replace(entry.status, **changes)  # type: ignore[arg-type]


def _expected_round_s(entry: _Topic) -> float:
    """What the topic's next round is expected to take (see `ROUND_MARGIN` and `MIN_ROUND_SHARE`)."""
    return max(MIN_ROUND_SHARE * entry.target_lag_s, ROUND_MARGIN * max(entry.durations, default=0.0))


def _partitions(table_offsets: Mapping[int, int], last_stable: Mapping[int, int]) -> tuple[PartitionStatus, ...]:
    return tuple(
        PartitionStatus(partition, table_offsets.get(partition, last_stable[partition]), last_stable[partition])
        for partition in sorted(last_stable)
    )
