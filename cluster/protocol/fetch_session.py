"""Incremental fetch sessions (KIP-227, Fetch v7+): what the broker remembers of a consumer's fetches between them.

A consumer that fetches the same partitions again and again need not list them all every time, nor hear about
every one of them every time. It opens a session with a full request (session id 0, epoch 0); the answer gives
the session's id. Its next requests are incremental (that id, epochs 1, 2, ...): they list only the partitions
whose fetch position or limit changed, and those it drops (`forgotten_topics_data`); the broker fetches every
partition of the session from the positions it remembers, and answers only the partitions that have something to
say: records, a high watermark or log start offset that moved since the last answer, or an error. This is Kafka's
`FetchSession.scala` (`FetchManager`, `FetchSessionCache`, the four `FetchContext`s) as plain classes, tested
without sockets; `cluster.protocol.handlers.fetch` drives them.

Request metadata (Kafka's `FetchMetadata`): session id 0 and epoch -1 (`FINAL_EPOCH`) is a sessionless full fetch
(every request before v7); session id 0, epoch 0 a full fetch asking for a new session; a session id with epoch -1
closes that session and fetches sessionless; a session id with epoch N > 0 is the session's next incremental
fetch. Epochs count 1, 2, ..., 2**31-1, then 1 again.

How a request is answered (`FetchSessionCache.new_context`, as Kafka's `FetchManager.newContext`):
- a full request closes the session it names, if any; with epoch 0 its answer creates a new session holding every
  partition answered (`FullFetchContext`), if the cache has a free slot or can evict one, else answers session id 0
  (the client then keeps sending full requests); with epoch -1 it creates none (`SessionlessFetchContext`);
- an incremental request for an unknown session id answers FETCH_SESSION_ID_NOT_FOUND (70), one whose epoch is not
  the session's next INVALID_FETCH_SESSION_EPOCH (71), one whose version uses topic ids (v13+) in a session opened
  with names (or the other way round) FETCH_SESSION_TOPIC_ID_ERROR (106); each answers session id 0 and no partition,
  and the client starts over with a full request. Otherwise the request's partitions update or join the session,
  the forgotten ones leave it, and its epoch moves on; a session left empty is closed and the request is answered
  sessionless (`IncrementalFetchContext`);
- an incremental answer leaves out each partition with no records, no error and the same high watermark and log
  start offset as the session last sent; a partition that had records moves to the end of the session's order, so
  the next fetches serve the others first when the response limit cuts them short. If another request of the same
  session moved the epoch on while this one was being served, this one answers INVALID_FETCH_SESSION_EPOCH.

Partitions of a session are named by topic id and partition (v13+) or by topic name and partition (v7-12). A topic
id the broker does not know (its topic deleted, or created after the listener last looked) stays in the session
with no name, answering UNKNOWN_TOPIC_ID (100) until the name is known (Kafka's `maybeResolveUnknownName`).

The cache (Kafka's `FetchSessionCache`, `max.incremental.fetch.session.cache.slots` sessions, 1000 by default) lives
in one listener process and holds the sessions of the connections that process serves; a client reconnecting to
another listener process (another node, or another of its `num.network.threads` processes) gets
FETCH_SESSION_ID_NOT_FOUND and opens a new session there. When it is full, a new session takes the place of:
1. the least recently used session, if it went unused for `MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS` (Kafka's
   120 s), else
2. the smallest session (consumers' before followers', `privileged`) among those created more than that long ago
   (and, for a follower's new session, every consumer's session), if the new session is a follower's and that one
   a consumer's, or has more partitions.
Otherwise no session is created. Kafka keeps this in 8 shards with sorted indexes updated each time a session is
used; this cache is one shard, and finds the session to evict by a scan of its sessions (at most
`max.incremental.fetch.session.cache.slots`), only when it is full, judging each session's age at that moment.
Session ids are random positive int32s, unique in the cache. Nothing here is thread-safe: the listener's event loop
is its only caller.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum

from storage.clock import Clock
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
MAX_SESSION_ID = 2**31 - 1
# Kafka's `KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`: a session unused this long may be evicted for any
# new one, and one created less than this long ago is never evicted for a bigger one.
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000
# Kafka's `max.incremental.fetch.session.cache.slots` default.
DEFAULT_CACHE_SLOTS = 1000
# The first Fetch version whose topics are named by topic id.
TOPIC_ID_VERSION = 13
# The first Fetch version with sessions.
SESSION_VERSION = 7

# A session partition's key: (topic id, partition) in a session using topic ids, (topic name, partition) otherwise.
PartitionKey = tuple[uuid.UUID | str, int]


class SessionError(IntEnum):
    """The session outcomes that are Kafka error codes (the request answers one of them and no partition)."""

    NONE = 0
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FETCH_SESSION_TOPIC_ID_ERROR = 106


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (Kafka's `FetchMetadata.nextEpoch`): -1 stays -1, the largest int32 wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


def is_full(epoch: int) -> bool:
    """Whether a request of this epoch lists every partition (epoch 0 or -1) rather than only the changed ones."""
    return epoch in (INITIAL_EPOCH, FINAL_EPOCH)


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """One partition a fetch asks for: its topic id (`ZERO_UUID` before v13), its topic name (None for an id the
    broker does not know), where and how much to read, and the leader epoch the client knows (v9+; -1: not
    checked), which a session keeps with the position until a request lists the partition again, as Kafka's
    `CachedPartition` does."""

    topic_id: uuid.UUID
    topic: str | None
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = UNDEFINED_EPOCH

    def key(self, uses_topic_ids: bool) -> PartitionKey:
        return (self.topic_id, self.partition) if uses_topic_ids else (self.topic or "", self.partition)


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What a fetch answered for one partition, as far as a session cares: the offsets sent, how many record bytes,
    and whether it was an error."""

    high_watermark: int
    log_start_offset: int
    records_bytes: int
    error: bool


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: what the client last asked for it, and the offsets last sent for it (-1: never, or
    an error since, so that the next answer is sent)."""

    request: PartitionRequest
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, outcome: PartitionOutcome) -> bool:
        """Whether an incremental answer must carry this partition; records what it carries (Kafka's
        `CachedPartition.maybeUpdateResponseData`)."""
        respond = outcome.records_bytes > 0 or outcome.error
        if outcome.high_watermark != self.high_watermark:
            respond = True
            self.high_watermark = outcome.high_watermark
        if outcome.log_start_offset != self.log_start_offset:
            respond = True
            self.log_start_offset = outcome.log_start_offset
        if outcome.error:
            self.high_watermark = -1
        return respond


@dataclass(slots=True)
class FetchSession:
    """One session: its id, whether a follower opened it, its partitions in fetch order, whether they are named by
    topic id, when it was created and last used, and the epoch its next request must carry."""

    id: int
    privileged: bool
    partitions: dict[PartitionKey, CachedPartition]
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int = 1  # next_epoch(INITIAL_EPOCH): the epoch of the session's first incremental request

    def update(self, requests: Sequence[PartitionRequest], forgotten: Iterable[PartitionKey]) -> None:
        """An incremental request's changes: its partitions join or update the session, `forgotten` leave it."""
        for request in requests:
            key = request.key(self.uses_topic_ids)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(request)
            else:
                cached.request = request
        for key in forgotten:
            self.partitions.pop(key, None)

    def resolved(self, topic_names: Mapping[uuid.UUID, str]) -> list[PartitionRequest]:
        """The session's partitions in fetch order, the topic of each named once its id is known."""
        requests = []
        for cached in self.partitions.values():
            request = cached.request
            if request.topic is None and self.uses_topic_ids and request.topic_id in topic_names:
                request = cached.request = replace(request, topic=topic_names[request.topic_id])
            requests.append(request)
        return requests


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """How a fetch's answer goes out: its top-level error, its session id, and which of the partitions fetched (by
    index into `FetchContext.partitions`) it carries, in the order it carries them."""

    error: SessionError
    session_id: int
    included: tuple[int, ...]


class FetchContext:
    """One request's view of its session: `partitions` to fetch, then `answer(outcomes)` (one per partition, in
    order) says what goes back. The sessionless form: every partition, session id 0."""

    def __init__(self, partitions: Sequence[PartitionRequest]) -> None:
        self.partitions = list(partitions)

    def answer(self, outcomes: Sequence[PartitionOutcome]) -> FetchAnswer:
        return FetchAnswer(SessionError.NONE, INVALID_SESSION_ID, tuple(range(len(outcomes))))

    def throttled(self) -> FetchAnswer:
        """The answer of a request a client quota throttled: no partition, and the session as it was (Kafka's
        `getThrottledResponse`); a full request creates none."""
        return FetchAnswer(SessionError.NONE, INVALID_SESSION_ID, ())


class SessionErrorContext(FetchContext):
    """A request whose session is unknown or out of step: nothing is fetched, the answer is the error alone."""

    def __init__(self, error: SessionError) -> None:
        super().__init__(())
        self.error = error

    def answer(self, outcomes: Sequence[PartitionOutcome]) -> FetchAnswer:
        return FetchAnswer(self.error, INVALID_SESSION_ID, ())

    def throttled(self) -> FetchAnswer:
        return self.answer(())


class FullFetchContext(FetchContext):
    """A full request asking for a session: every partition is answered, and the answer creates the session."""

    def __init__(
        self, cache: FetchSessionCache, partitions: Sequence[PartitionRequest], uses_topic_ids: bool, privileged: bool
    ) -> None:
        super().__init__(partitions)
        self._cache = cache
        self._uses_topic_ids = uses_topic_ids
        self._privileged = privileged

    def answer(self, outcomes: Sequence[PartitionOutcome]) -> FetchAnswer:
        cached: dict[PartitionKey, CachedPartition] = {}
        for request, outcome in zip(self.partitions, outcomes, strict=True):
            cached[request.key(self._uses_topic_ids)] = CachedPartition(
                request, -1 if outcome.error else outcome.high_watermark, outcome.log_start_offset
            )
        session_id = self._cache.maybe_create_session(self._privileged, cached, self._uses_topic_ids)
        return FetchAnswer(SessionError.NONE, session_id, tuple(range(len(outcomes))))


class IncrementalFetchContext(FetchContext):
    """An incremental request of a session: every partition of the session is fetched, and the answer carries only
    those that changed (see the module docstring)."""

    def __init__(self, session: FetchSession, request_epoch: int, topic_names: Mapping[uuid.UUID, str]) -> None:
        super().__init__(session.resolved(topic_names))
        self._session = session
        self._request_epoch = request_epoch

    def throttled(self) -> FetchAnswer:
        session = self._session
        if session.epoch != next_epoch(self._request_epoch):
            return FetchAnswer(SessionError.INVALID_FETCH_SESSION_EPOCH, session.id, ())
        return FetchAnswer(SessionError.NONE, session.id, ())

    def answer(self, outcomes: Sequence[PartitionOutcome]) -> FetchAnswer:
        session = self._session
        if session.epoch != next_epoch(self._request_epoch):
            # Another request of this session was answered meanwhile: this one is a duplicate.
            return FetchAnswer(SessionError.INVALID_FETCH_SESSION_EPOCH, session.id, ())
        included = []
        for index, (request, outcome) in enumerate(zip(self.partitions, outcomes, strict=True)):
            key = request.key(session.uses_topic_ids)
            cached = session.partitions.get(key)
            if cached is None:
                # Forgotten by a later request of the session meanwhile.
                continue
            if cached.must_respond(outcome):
                included.append(index)
                if outcome.records_bytes > 0:
                    session.partitions[key] = session.partitions.pop(key)
        return FetchAnswer(SessionError.NONE, session.id, tuple(included))


class FetchSessionCache:
    """The sessions of one listener process, at most `max_entries` (see the module docstring)."""

    def __init__(
        self,
        max_entries: int,
        clock: Clock,
        eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        self._max_entries = max_entries
        self._clock = clock
        self._eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        """Partitions cached over every session (Kafka's NumIncrementalFetchPartitionsCached)."""
        # A copy first: the metrics exporter's thread reads this while the event loop changes the sessions.
        return sum(len(session.partitions) for session in list(self._sessions.values()))

    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        partitions: Sequence[PartitionRequest],
        forgotten: Sequence[PartitionKey],
        topic_names: Mapping[uuid.UUID, str],
        privileged: bool = False,
    ) -> FetchContext:
        """How a Fetch request of `version` with this session id and epoch is answered (see the module docstring);
        `partitions` are the request's, `forgotten` its forgotten partitions' keys, `topic_names` the topics the
        broker knows by id."""
        uses_topic_ids = version >= TOPIC_ID_VERSION
        if version < SESSION_VERSION:
            return FetchContext(partitions)
        if is_full(epoch):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            if epoch == FINAL_EPOCH:
                return FetchContext(partitions)
            return FullFetchContext(self, partitions, uses_topic_ids, privileged)
        session = self._sessions.get(session_id)
        if session is None:
            return SessionErrorContext(SessionError.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionErrorContext(SessionError.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionErrorContext(SessionError.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(partitions, forgotten)
        if not session.partitions:
            self.remove(session.id)
            return FetchContext(partitions)
        session.last_used_ms = self._clock.milliseconds()
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(session, epoch, topic_names)

    def maybe_create_session(
        self, privileged: bool, partitions: dict[PartitionKey, CachedPartition], uses_topic_ids: bool
    ) -> int:
        """A new session holding `partitions`, if there is room or a session can be evicted for it; its id, or 0."""
        now_ms = self._clock.milliseconds()
        if len(self._sessions) >= self._max_entries and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), privileged, partitions, uses_topic_ids, now_ms, now_ms)
        self._sessions[session.id] = session
        return session.id

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, MAX_SESSION_ID)
            if session_id not in self._sessions:
                return session_id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Evicts one session for a new one of `size` partitions, if the rules of the module docstring allow one."""
        if not self._sessions:
            return False
        stalest = min(self._sessions.values(), key=lambda session: (session.last_used_ms, session.id))
        if now_ms - stalest.last_used_ms > self._eviction_ms:
            self._evict(stalest)
            return True
        evictable = [
            session
            for session in self._sessions.values()
            if now_ms - session.creation_ms > self._eviction_ms or (privileged and not session.privileged)
        ]
        if not evictable:
            return False
        smallest = min(evictable, key=lambda session: (session.privileged, len(session.partitions), session.id))
        # Kafka compares (privileged, size, id) with the new session's id as 0: a tie on the first two keeps the old.
        if (privileged, size) <= (smallest.privileged, len(smallest.partitions)):
            return False
        self._evict(smallest)
        return True

    def _evict(self, session: FetchSession) -> None:
        del self._sessions[session.id]
        self.evictions += 1


def forgotten_key(topic_id: uuid.UUID, topic: str | None, partition: int, uses_topic_ids: bool) -> PartitionKey:
    """The session key of a forgotten partition as a request names it (by id from v13, by name before)."""
    return (topic_id, partition) if uses_topic_ids else (topic or "", partition)
