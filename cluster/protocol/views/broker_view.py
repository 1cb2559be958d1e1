"""What the protocol handlers need of the broker, written once over two seams.

Handlers speak Kafka; the broker speaks roles. `BrokerView` is the seam between them: topic metadata with each
partition's leader, leader epoch and replicas, the brokers' advertised listeners, the topic administration calls
(create, delete, grow, configs), and the partition calls a Produce, Fetch, ListOffsets or DeleteRecords request
turns into. It reaches the controller through a `Transport` (`cluster.protocol.views.transport`: the controller
actor, or the in-process broker's controller on the event loop), and the partitions' leaders through a
`PartitionTransport`, the one part each host writes its own way: `RayPartitions`
(`cluster.protocol.views.ray_broker_view`: partition actors, the append route with its same-node channels, reads
from this node's segment files without a call) and `InProcessPartitions`
(`cluster.protocol.views.in_process_broker_view`: the in-process broker's `PartitionServer`s, which the handlers'
tests run on, without Ray). Topics are described from the controller's metadata with `topic_info`.

Every method raises the broker's typed errors (`storage.errors`), which the handlers turn into Kafka error codes
through `cluster.protocol.error_codes`; none raises Ray's.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
import uuid
from collections.abc import Awaitable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from actors.core.controller.elections import ElectionError, ElectionType
from actors.core.controller.topic_metadata import AdvertisedListener, TopicMetadata
from actors.core.shares.acknowledgements import AcknowledgementBatch
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.leader_shares import ShareFetched, ShareOffsets
from cluster.protocol.file_region import FileRegion
from cluster.protocol.views.local_log_dirs import LocalLogDir
from cluster.protocol.views.metadata_cache import MISS, MetadataCache
from cluster.protocol.views.transport import Transport
from storage.errors import BrokerNotAvailableError, InvalidReplicaAssignmentError, RaybrokerError, RequestTimedOutError
from storage.kafka_uuid import ZERO_UUID
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH
from storage.partition.log import LogAppendInfo
from storage.partition.producer_state import ActiveProducer
from storage.records.file_records import TimestampAndOffset
from storage.segment.transaction_index import AbortedTxn
from storage.topic_partition import TopicPartition

# How stale a view's topic ids may be (`BrokerView.topic_names`): a topic deleted and created again under its name
# within this time may still have its old id served by the new topic for that long (a fetch by an unknown id asks
# the controller at once).
TOPIC_NAMES_MAX_AGE_S = 1.0
# How long a metadata question the controller answered before waits for it again before the last answer is served
# (`BrokerView._metadata`): a controller that runs answers in milliseconds.
KNOWN_ANSWER_WAIT_S = 5.0
# The metadata questions a request joins when the same one is in flight already (`BrokerView._metadata`): the
# cluster's brokers and listeners, which change only when a broker or listener starts or stops, and which every
# Metadata request asks twice (for its brokers and for its partitions' replicas). Topic questions are not joined, so
# a topic created or changed through this listener is seen by the next request.
SHARED_QUESTIONS = frozenset({"listeners", "brokers"})
# The metadata questions whose answers a view with a metadata cache keeps (`cluster.protocol.views.metadata_cache`).
CACHED_QUESTIONS = frozenset({"topics", "describe_topic", "listeners", "brokers"})


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A broker as clients must reach it: its Kafka node id and advertised address (its first advertised listener's),
    and every advertised listener as (name, host, port). A client is told the address of the listener it came in
    on (`for_listener`), as Kafka does: an SSL client must not be sent to a PLAINTEXT port."""

    node_id: int
    host: str
    port: int
    listeners: tuple[tuple[str, str, int], ...] = ()

    def for_listener(self, listener_name: str) -> BrokerEndpoint:
        """This broker at its listener named `listener_name`; at its first one if it has no such listener."""
        for name, host, port in self.listeners:
            if name == listener_name:
                return BrokerEndpoint(self.node_id, host, port, self.listeners)
        return self


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition's replication as Metadata describes it, in Kafka broker ids (the `node.id` of the listener on
    each replica's node; a replica whose node runs no listener has no id and is left out of the lists).

    `leader` is None when the leader's node runs no listener (any listener then serves the partition, through Ray)
    or when there is no leader at all (`offline`: none of the in-sync replicas runs). `offline_replicas` are the
    listed replicas whose broker is not running."""

    leader: int | None = None
    leader_epoch: int = 0
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    offline: bool = False


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as Metadata describes it: its partition count, whether it is internal (`__consumer_offsets`), its
    replication factor, each partition's leader, epoch and replicas (`partitions`; a partition with no entry
    is described by `PartitionInfo()`: led, in epoch 0, by whichever listener is asked), and its topic id."""

    name: str
    partition_count: int
    internal: bool
    replication_factor: int = 1
    partitions: tuple[PartitionInfo, ...] = ()
    topic_id: uuid.UUID = ZERO_UUID

    def partition(self, partition: int) -> PartitionInfo:
        return self.partitions[partition] if partition < len(self.partitions) else PartitionInfo()


@dataclass(frozen=True, slots=True)
class FetchedRecords:
    """One partition's answer to a fetch: whole batches as stored (the last may be cut short, as Kafka's are),
    as bytes or as a region of the segment file to `sendfile` (`cluster.protocol.file_region`), and the
    partition's offsets when they were read. A read_committed fetch's bytes end at the last stable offset and it
    carries the aborted transactions overlapping them (`storage.partition.file_slices.located_aborted_transactions`);
    a read_uncommitted one carries None there."""

    records: bytes | FileRegion
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    aborted_transactions: tuple[AbortedTxn, ...] | None = None


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """A partition's offsets at one moment."""

    log_start_offset: int
    high_watermark: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """A partition leader's answer to OffsetForLeaderEpoch: the requested epoch's end as its log's leader-epoch cache
    gives it (-1, -1 when it has none)."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition's part of a Fetch, as `BrokerView.fetch` hands it to the host's `PartitionTransport`."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_wait_ms: int
    min_bytes: int
    isolation: str = "high_watermark"
    current_leader_epoch: int = UNDEFINED_EPOCH

    @property
    def key(self) -> tuple[str, int]:
        """The partition, as (topic, partition)."""
        return self.topic, self.partition


class PartitionTransport(Protocol):
    """How a view reaches the partitions' leaders on its host (see the module docstring): the leader's methods
    called by name, and the host's own ways to append and to fetch. Each raises the broker's typed errors."""

    async def call(self, topic: str, partition: int, method: str, *args: Any) -> Any:
        """The partition leader's `method` called with `args` (a `PartitionServer` method, which the partition
        actor has too); its result, or its typed error."""
        ...

    async def append(
        self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int, admitted: Awaitable[None] | None
    ) -> LogAppendInfo:
        """`BrokerView.append`."""
        ...

    async def fetch(self, request: PartitionFetch) -> FetchedRecords:
        """`BrokerView.fetch`."""
        ...

    async def list_offset(
        self, topic: str, partition: int, timestamp: int, isolation: str, current_leader_epoch: int
    ) -> TimestampAndOffset | None:
        """`BrokerView.list_offset`."""
        ...

    def forget_topic(self, topic: str) -> None:
        """Drops what is kept of a deleted topic's partitions, so a topic created again is looked up afresh."""
        ...

    async def log_dirs(self) -> list[LocalLogDir]:
        """This node's configured log dirs and the replicas each holds (`cluster.protocol.views.local_log_dirs`)."""
        ...

    async def alter_replica_log_dirs(
        self, dirs: Mapping[TopicPartition, str]
    ) -> dict[TopicPartition, RaybrokerError | None]:
        """This node's log manager's `alter_replica_log_dirs`."""
        ...

    def close(self) -> None:
        """Closes what the transport holds open (connections, watchers); called once the listener stops."""
        ...


class BrokerView:
    """The broker as the protocol handlers see it, as the listener of node `node` (see the module docstring). With
    `metadata_cache`, the controller's answers to metadata questions are kept while the controller's metadata does
    not change (`cluster.protocol.views.metadata_cache`), as a Kafka broker answers Metadata from its own cache."""

    def __init__(
        self, controller: Transport, partitions: PartitionTransport, node: str, *, metadata_cache: bool = False
    ) -> None:
        self._controller = controller
        self._cache = MetadataCache(controller) if metadata_cache else None
        self._partitions = partitions
        self._node = node
        self._cluster_id: str | None = None
        self._topic_names: Mapping[uuid.UUID, str] = {}
        self._topic_names_at = -math.inf
        self._known: dict[tuple[Any, ...], Any] = {}
        self._asking: dict[tuple[str, int], asyncio.Future[tuple[Any, bool]]] = {}

    async def cluster_id(self) -> str:
        """The cluster's id, as Metadata v2+ reports it."""
        if self._cluster_id is None:
            self._cluster_id = await self._controller.call("cluster_id")
        return self._cluster_id

    async def announce(self, endpoint: BrokerEndpoint) -> None:
        """This listener serves its node's broker at `endpoint` (Metadata names it leader of the node's
        partitions); `InvalidConfigError` when another node's broker has the same node id."""
        await self._controller.call("register_listener", self._node, advertised(endpoint))

    async def withdraw(self, endpoint: BrokerEndpoint) -> None:
        """This listener stops serving at `endpoint`: unregistered, and what its partition transport holds open
        closed."""
        try:
            await self._change("unregister_listener", self._node, advertised(endpoint))
        finally:
            self._partitions.close()
            if self._cache is not None:
                await self._cache.close()

    async def _change(self, method: str, *args: Any) -> Any:
        """The controller's `method`, a change of what Metadata shows: the metadata cache, if any, is emptied when it
        returns, so this listener's next request sees the change."""
        try:
            return await self._controller.call(method, *args)
        finally:
            if self._cache is not None:
                self._cache.invalidate()

    async def brokers(self) -> list[BrokerEndpoint]:
        """The advertised listener of every node where one runs."""
        listeners = await self._listeners()
        return [
            BrokerEndpoint(found.broker_id, found.host, found.port, found.listeners) for found in listeners.values()
        ]

    async def _metadata(self, method: str, *args: Any) -> Any:
        """The controller's answer to a metadata question (`method`), or, while the controller does not answer
        (unreachable, or silent for `KNOWN_ANSWER_WAIT_S`), its last answer to the same question: a Kafka
        broker answers Metadata from its metadata cache whether its controller is reachable or not, and so the
        listeners of the nodes that keep running serve their partitions while the head is lost. A question never
        answered yet waits for the controller and raises its error, and so does a question the controller answers
        with an error (the last answer is then forgotten). A question of `SHARED_QUESTIONS` joins the same question's
        call in flight, if any: one call answers them all. With a metadata cache, a question of `CACHED_QUESTIONS`
        is answered from it when it holds the answer, and an answer the controller gave to this question is kept;
        a last answer given in the controller's place is not, nor one from a call begun before the cache was last
        emptied, since either may predate a change the cache has already seen."""
        if self._cache is None or method not in CACHED_QUESTIONS:
            answer, _given = await self._question(0, method, *args)
            return answer
        question = (method, *args)
        kept = self._cache.get(question)
        if kept is not MISS:
            return kept
        generation = self._cache.generation()
        answer, given = await self._question(generation, method, *args)
        if given:
            self._cache.put(question, answer, generation)
        return answer

    async def _question(self, generation: int, method: str, *args: Any) -> tuple[Any, bool]:
        """`_ask`'s answer to `_metadata`'s question, or the answer of the same question in flight since the cache's
        `generation` (see `_metadata`)."""
        if method not in SHARED_QUESTIONS:
            return await self._ask(method, *args)
        key = (method, generation)
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(self._ask(method))
            self._asking[key] = asking
            asking.add_done_callback(functools.partial(self._asked, key))
        # Shielded: a request cancelled (its connection closed) leaves the call to the others that joined it.
        return await asyncio.shield(asking)

    def _asked(self, key: tuple[str, int], asking: asyncio.Future[tuple[Any, bool]]) -> None:
        """A shared question answered: the next one is asked anew. Its error is taken here too, for when every
        request that joined it was cancelled meanwhile."""
        if self._asking.get(key) is asking:
            del self._asking[key]
        if not asking.cancelled():
            asking.exception()

    async def _ask(self, method: str, *args: Any) -> tuple[Any, bool]:
        """`_metadata`'s question asked of the controller (see there): the answer, and whether the controller gave
        it (False: the last answer, given in its place)."""
        question = (method, *args)
        known = self._known.get(question)
        try:
            if known is None:
                answer = await self._controller.call(method, *args)
            else:
                answer = await asyncio.wait_for(self._controller.call(method, *args), KNOWN_ANSWER_WAIT_S)
        except TimeoutError:
            return known, False
        except (BrokerNotAvailableError, RequestTimedOutError):
            if known is None:
                raise
            return known, False
        except RaybrokerError:
            # Answered (a topic deleted since): the last answer no longer holds.
            self._known.pop(question, None)
            raise
        self._known[question] = answer
        return answer, True

    async def topics(self) -> dict[str, TopicInfo]:
        """Every topic, internal ones included."""
        asked, cluster = await asyncio.gather(self._metadata("topics"), self._cluster())
        described: dict[str, TopicMetadata] = asked
        return {name: topic_info(metadata, *cluster) for name, metadata in described.items()}

    async def topic(self, name: str) -> TopicInfo:
        """One topic; `UnknownTopicOrPartitionError` if there is none of that name."""
        asked, cluster = await asyncio.gather(self._metadata("describe_topic", name), self._cluster())
        return topic_info(asked, *cluster)

    async def topic_names(self, refresh: bool = False) -> Mapping[uuid.UUID, str]:
        """Every topic's name by its topic id, as the controller had them at most `TOPIC_NAMES_MAX_AGE_S` ago, or
        now with `refresh` (Fetch v13+ and Metadata v12 name topics by id, and a new id is asked for at once)."""
        if refresh or time.monotonic() - self._topic_names_at > TOPIC_NAMES_MAX_AGE_S:
            asked_at = time.monotonic()
            self._topic_names = await self._metadata("topic_names")
            self._topic_names_at = asked_at
        return self._topic_names

    async def topic_names_naming(self, topic_ids: Iterable[uuid.UUID]) -> Mapping[uuid.UUID, str]:
        """`topic_names`, asked afresh when one of `topic_ids` is not among them: what a request naming topics by id
        (Fetch v13+, Produce v13, OffsetCommit and OffsetFetch v10) resolves them with, so that a topic created a
        moment ago is found and an id no topic has costs one question to the controller."""
        names = await self.topic_names()
        if any(topic_id not in names for topic_id in topic_ids):
            names = await self.topic_names(refresh=True)
        return names

    async def create_topic(
        self,
        name: str,
        partition_count: int,
        config: Mapping[str, str] | None = None,
        validate_only: bool = False,
        replication_factor: int | None = None,
        assignment: Sequence[tuple[int, ...]] | None = None,
    ) -> TopicInfo:
        """Creates a topic with `config` (Kafka's topic config names) over the broker's defaults and
        `replication_factor` replicas per partition (None: `default.replication.factor`), or each partition's
        replicas on the brokers `assignment` names by Kafka broker id; with `validate_only`, only checks that it
        could. `TopicExistsError`, `InvalidTopicError`, `InvalidConfigError`, `InvalidPartitionsError`,
        `InvalidReplicationFactorError` (below 1 or above the running brokers), `InvalidReplicaAssignmentError`."""
        nodes = None if assignment is None else await self._assigned_nodes(assignment)
        created = await self._change(
            "create_topic", name, partition_count, dict(config or {}), validate_only, replication_factor, nodes
        )
        return topic_info(created, *await self._cluster())

    async def _assigned_nodes(self, assignment: Sequence[tuple[int, ...]]) -> list[tuple[str, ...]]:
        """A manual assignment's Ray nodes, each list's as `_nodes_of` finds them."""
        nodes = await self._nodes_by_broker_id()
        return [_nodes_of(broker_ids, nodes) for broker_ids in assignment]

    async def _nodes_by_broker_id(self) -> dict[int, str]:
        """The Ray node of each Kafka broker id a running listener announces."""
        return {found.broker_id: node for node, found in (await self._listeners()).items()}

    async def delete_topic(self, name: str) -> None:
        """Deletes a topic; `UnknownTopicOrPartitionError` if there is none of that name."""
        await self._change("delete_topic", name)
        self._partitions.forget_topic(name)
        self._topic_names_at = -math.inf

    async def create_partitions(
        self, name: str, total: int, validate_only: bool = False, assignment: Sequence[tuple[int, ...]] | None = None
    ) -> TopicInfo:
        """Grows a topic to `total` partitions (or only checks that it could), the new ones placed by the controller
        or on the brokers `assignment` names by Kafka broker id; `InvalidPartitionsError` unless it grows,
        `InvalidReplicaAssignmentError` for an assignment Kafka's controller refuses."""
        nodes = None
        if assignment is not None:
            await self._controller.call("describe_topic", name)  # an unknown topic is refused first, as in Kafka
            nodes = await self._assigned_nodes(assignment)
        grown = await self._change("add_partitions", name, total, validate_only, nodes)
        return topic_info(grown, *await self._cluster())

    async def topic_config(self, name: str) -> dict[str, str]:
        """A topic's config overrides (Kafka names); what it does not override is the broker's default."""
        metadata: TopicMetadata = await self._controller.call("describe_topic", name)
        return dict(metadata.config)

    async def set_topic_config(self, name: str, config: Mapping[str, str], validate_only: bool = False) -> None:
        """Replaces a topic's config overrides with `config` (or only checks them); `InvalidConfigError`."""
        await self._change("set_topic_config", name, dict(config), validate_only)

    async def broker_configs(self, broker: str) -> tuple[dict[str, str], dict[str, str]]:
        """The run-time configs of broker `broker`'s own level and of every broker's level."""
        return await self._controller.call("broker_configs", broker)

    async def alter_broker_configs(
        self, broker: str, changes: Mapping[str, str | None], validate_only: bool = False
    ) -> None:
        """Sets (None: deletes) run-time configs of broker `broker` ("": every broker); `InvalidConfigError`."""
        await self._controller.call("alter_broker_configs", broker, dict(changes), validate_only)

    async def group_config(self, group: str) -> tuple[dict[str, str], dict[str, str]]:
        """The keys group `group`'s GROUP config resource sets, and every group key's value where a group sets none
        (the controller's broker config)."""
        return await self._controller.call("group_config", group)

    async def set_group_config(self, group: str, configs: Mapping[str, str], validate_only: bool = False) -> None:
        """Replaces group `group`'s own configs with `configs` (or only checks them); `InvalidConfigError`."""
        await self._controller.call("set_group_config", group, dict(configs), validate_only)

    async def configured_groups(self) -> list[str]:
        """The groups whose GROUP config resource ListConfigResources names (the controller's `configured_groups`)."""
        return await self._controller.call("configured_groups")

    async def allocate_producer_id(self) -> int:
        """A fresh idempotent-producer id, never handed out before in this cluster."""
        return await self._controller.call("allocate_producer_id")

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Iterable[tuple[str, int]] | None
    ) -> dict[tuple[str, int], ElectionError]:
        """Kafka's ElectLeaders: each partition's outcome (`Controller.elect_leaders`; None: every partition)."""
        wanted = None if partitions is None else list(partitions)
        return await self._change("elect_leaders", election_type, wanted)

    async def alter_partition_reassignments(
        self, requests: Mapping[tuple[str, int], tuple[int, ...] | None], allow_replication_factor_change: bool = True
    ) -> dict[tuple[str, int], RaybrokerError | None]:
        """Kafka's AlterPartitionReassignments: each partition's target replicas by Kafka broker id (None: cancel
        the one in progress), answered per partition by the controller (`Controller.alter_partition_reassignments`,
        which refuses a change of replication factor unless `allow_replication_factor_change`, KIP-860). A broker
        id no running listener announces is refused here with Kafka's message."""
        nodes = await self._nodes_by_broker_id()
        refused: dict[tuple[str, int], RaybrokerError | None] = {}
        translated: dict[tuple[str, int], tuple[str, ...] | None] = {}
        for key, broker_ids in requests.items():
            try:
                translated[key] = None if broker_ids is None else _nodes_of(broker_ids, nodes)
            except InvalidReplicaAssignmentError as exc:
                refused[key] = exc
        answered: dict[tuple[str, int], RaybrokerError | None] = (
            await self._change("alter_partition_reassignments", translated, allow_replication_factor_change)
            if translated
            else {}
        )
        return {key: answered.get(key, refused.get(key)) for key in requests}

    async def partition_reassignments(self) -> list[tuple[str, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """Kafka's ListPartitionReassignments: each partition being reassigned with its replicas, adding and
        removing replicas, by Kafka broker id."""
        states = await self._controller.call("partition_reassignments")
        listeners = await self._listeners()

        def broker_ids(nodes: Iterable[str]) -> tuple[int, ...]:
            return tuple(listeners[node].broker_id for node in nodes if node in listeners)

        return [
            (s.topic, s.partition, broker_ids(s.replicas), broker_ids(s.adding), broker_ids(s.removing)) for s in states
        ]

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: records below `offset` (-1: the high watermark) go; the new log start offset.
        `OffsetOutOfRangeError` beyond the high watermark."""
        return await self._partitions.call(topic, partition, "delete_records", offset)

    async def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        """A partition's log start offset, high watermark and log end offset now."""
        return PartitionOffsets(*await self._partitions.call(topic, partition, "offsets"))

    async def epoch_end_offset(
        self, topic: str, partition: int, epoch: int, current_leader_epoch: int
    ) -> EpochEndOffset:
        """The end offset of `epoch` in the partition leader's log (OffsetForLeaderEpoch); `FencedLeaderEpochError`
        or `UnknownLeaderEpochError` when `current_leader_epoch` (-1: not checked) is older or newer than the
        leader's."""
        answer = await self._partitions.call(topic, partition, "epoch_end_offset", epoch, current_leader_epoch)
        return EpochEndOffset(*answer)

    async def describe_producers(self, topic: str, partition: int) -> list[ActiveProducer]:
        """The producers the partition's leader remembers, each with the start offset of its open transaction
        (DescribeProducers)."""
        return await self._partitions.call(topic, partition, "describe_producers")

    async def append(
        self,
        topic: str,
        partition: int,
        records: bytes,
        acks: int = 1,
        timeout_ms: int = 30_000,
        admitted: Awaitable[None] | None = None,
    ) -> LogAppendInfo:
        """Appends a client's record batches, unchanged, to the partition's leader; with `acks` -1, answers once
        every in-sync replica has them (or fails after `timeout_ms`, the request's `timeout`). Appends to one
        partition reach its leader in the order `append` was called (its first step, before it awaits anything),
        whatever each awaits: `admitted`, when given, must end without error before the append is sent, and its
        error fails the append unsent (a transactional batch's verification)."""
        return await self._partitions.append(topic, partition, records, acks, timeout_ms, admitted)

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int,
        isolation: str = "high_watermark",
        current_leader_epoch: int = UNDEFINED_EPOCH,
    ) -> FetchedRecords:
        """Batches from `offset`, at most `max_bytes` but at least one batch, below the high watermark or, with
        `isolation="txn_committed"` (read_committed), below the last stable offset; with `max_wait_ms` > 0 waits up
        to that long for `min_bytes` to be there. `OffsetOutOfRangeError` outside log start..log end;
        `FencedLeaderEpochError` or `UnknownLeaderEpochError` when `current_leader_epoch` (-1: not checked) is older
        or newer than the leader's, checked before anything else, and again each time a waiting fetch looks."""
        request = PartitionFetch(
            topic, partition, offset, max_bytes, max_wait_ms, min_bytes, isolation, current_leader_epoch
        )
        return await self._partitions.fetch(request)

    async def share_fetch(
        self,
        topic: str,
        partition: int,
        group_id: str,
        member_id: str,
        config: ResolvedShareConfig,
        max_bytes: int,
        max_records: int,
        max_wait_ms: int = 0,
        record_limit: bool = False,
        acknowledgements: list[AcknowledgementBatch] | None = None,
    ) -> ShareFetched:
        """Records of the partition acquired for a share group's member by the partition's leader, which holds the
        group's share-partition, waiting there up to `max_wait_ms` when there are none, at most `max_records` with
        `record_limit`, the member's `acknowledgements` of the partition applied in the same call
        (`PartitionServer.share_fetch`)."""
        return await self._partitions.call(
            topic,
            partition,
            "share_fetch",
            group_id,
            member_id,
            config,
            max_bytes,
            max_records,
            max_wait_ms,
            record_limit,
            acknowledgements,
        )

    async def share_acknowledge(
        self,
        topic: str,
        partition: int,
        group_id: str,
        member_id: str,
        config: ResolvedShareConfig,
        batches: list[AcknowledgementBatch],
        renew: bool = False,
    ) -> None:
        """A share group member's acknowledgements of records it acquired, all or none, at the partition's leader,
        RENEW among them only with `renew` (`PartitionServer.share_acknowledge`)."""
        await self._partitions.call(topic, partition, "share_acknowledge", group_id, member_id, config, batches, renew)

    async def share_release(self, topic: str, partition: int, group_id: str, member_id: str) -> None:
        """Releases the records a share group member holds in the partition (its share session closed)."""
        await self._partitions.call(topic, partition, "share_release", group_id, member_id)

    async def share_offsets(self, topic: str, partition: int, group_id: str) -> ShareOffsets | None:
        """The group's share-partition as DescribeShareGroupOffsets reports it, from the partition's leader
        (`PartitionServer.share_offsets`); None if the group has none there."""
        return await self._partitions.call(topic, partition, "share_offsets", group_id)

    async def alter_share_offset(self, topic: str, partition: int, group_id: str, start_offset: int) -> None:
        """The group's share-partition set to start at `start_offset` by the partition's leader
        (`PartitionServer.alter_share_offset`)."""
        await self._partitions.call(topic, partition, "alter_share_offset", group_id, start_offset)

    async def delete_share_state(self, topic: str, partition: int, group_id: str) -> bool:
        """The group's share-partition dropped by the partition's leader (`PartitionServer.delete_share_state`);
        whether it had one."""
        return bool(await self._partitions.call(topic, partition, "delete_share_state", group_id))

    async def log_dirs(self) -> list[LocalLogDir]:
        """This node's log dirs with their replicas, as DescribeLogDirs reports them (the answering broker's own)."""
        return await self._partitions.log_dirs()

    async def alter_replica_log_dirs(
        self, dirs: Mapping[TopicPartition, str]
    ) -> dict[TopicPartition, RaybrokerError | None]:
        """This node's replicas moved into the log dirs named (AlterReplicaLogDirs: the answering broker's own), with
        each partition's error, None when its move started or it is in that dir already."""
        return await self._partitions.alter_replica_log_dirs(dirs)

    async def list_offset(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        isolation: str = "high_watermark",
        current_leader_epoch: int = UNDEFINED_EPOCH,
    ) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition at `isolation`: -2 earliest, -1 latest (the high watermark, or the
        last stable offset for `txn_committed`), -3 max timestamp, or the first record at or after a timestamp in
        ms, below that same bound; None when no record qualifies. Only the leader answers, after checking
        `current_leader_epoch` as `fetch` does."""
        return await self._partitions.list_offset(topic, partition, timestamp, isolation, current_leader_epoch)

    async def _listeners(self) -> dict[str, AdvertisedListener]:
        return await self._metadata("listeners")

    async def _cluster(self) -> tuple[dict[str, AdvertisedListener], frozenset[str]]:
        """The listeners by node id, and the node ids of the running brokers, asked together."""
        listeners, brokers = await asyncio.gather(self._listeners(), self._metadata("brokers"))
        return listeners, frozenset(brokers)


def _nodes_of(broker_ids: tuple[int, ...], nodes: Mapping[int, str]) -> tuple[str, ...]:
    """The Ray nodes of a manual replica assignment (`nodes`: each broker id's); `InvalidReplicaAssignmentError` with
    Kafka's controller's message for a list it refuses, checked in its order (an empty list, then each broker id in
    ascending order: not registered, or named twice)."""
    if not broker_ids:
        raise InvalidReplicaAssignmentError("The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(broker_ids):
        if broker not in nodes:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes broker {broker}, but no such broker is registered."
            )
        if broker == previous:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes the broker {broker} more than once."
            )
        previous = broker
    return tuple(nodes[broker] for broker in broker_ids)


def topic_info(
    metadata: TopicMetadata, listeners: Mapping[str, AdvertisedListener], live: Collection[str]
) -> TopicInfo:
    """The topic with each partition's replication state in Kafka broker ids: each replica (Ray node) named by the
    broker id of the listener on its node, and left out when its node runs none (`PartitionInfo`)."""

    def broker_ids(nodes: Iterable[str]) -> tuple[int, ...]:
        return tuple(listeners[node].broker_id for node in nodes if node in listeners)

    partitions = []
    for partition in range(len(metadata.partitions)):
        state = metadata.state(partition)
        leader = listeners.get(state.leader)
        partitions.append(
            PartitionInfo(
                leader=None if leader is None else leader.broker_id,
                leader_epoch=state.leader_epoch,
                replicas=broker_ids(state.replicas),
                isr=broker_ids(state.isr),
                offline_replicas=broker_ids(node for node in state.replicas if node not in live),
                offline=state.offline,
            )
        )
    replication_factor = metadata.replication_factor
    return TopicInfo(
        metadata.name,
        len(metadata.partitions),
        metadata.internal,
        replication_factor,
        tuple(partitions),
        metadata.topic_id,
    )


def advertised(endpoint: BrokerEndpoint) -> AdvertisedListener:
    """The endpoint as the controller records a listener's advertised address."""
    return AdvertisedListener(endpoint.node_id, endpoint.host, endpoint.port, endpoint.listeners)
