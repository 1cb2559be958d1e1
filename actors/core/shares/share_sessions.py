"""Share sessions (KIP-932): what a broker remembers of each share consumer between its ShareFetch (78) and
ShareAcknowledge (79) requests, as Kafka 4.2's `SharePartitionManager.newContext` and `ShareSessionCache` keep it.

A session is keyed by (group id, member id) and holds the share-partitions the member fetches from and the epoch its
next request must carry. Epochs (Kafka's `ShareRequestMetadata`):

- ShareFetch with epoch 0 opens a session (replacing any the member had) over the partitions it names; its answer
  is a full one, and the next request carries epoch 1. Acknowledgements in it are INVALID_REQUEST (nothing is held
  yet), and change nothing.
- ShareFetch with epoch -1 closes the session: acknowledgements in it are applied, then every record the member
  holds in the session's partitions is released; nothing is fetched. Without a session it is
  SHARE_SESSION_NOT_FOUND.
- Any other epoch must be the session's: without a session SHARE_SESSION_NOT_FOUND, otherwise a different epoch
  INVALID_SHARE_SESSION_EPOCH (both change nothing); the partitions named are added, the forgotten ones dropped,
  and the epoch moves to the next (after 2^31 - 1 comes 1).
- ShareAcknowledge never opens a session: epoch 0 is INVALID_SHARE_SESSION_EPOCH; -1 acknowledges and closes, as a
  final ShareFetch does; any other epoch is checked and moved on as a ShareFetch's.

A session belongs to the client connection that opened it (Kafka 4.2's `ShareSessionCache` maps connection ids to
sessions): when that connection closes, `disconnected` forgets the session and hands back what the member held, for
its records to be released at once rather than when their locks expire. A session the member opened again over
another connection stays.

Not kept yet: a limit on sessions (Kafka's SHARE_SESSION_LIMIT_REACHED) and the eviction of idle ones; a session
lives until the member closes it, opens another, its connection closes, or the broker restarts.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from storage.errors import InvalidRequestError, InvalidShareSessionEpochError, ShareSessionNotFoundError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

SharePartitionKey = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (Kafka's `ShareRequestMetadata.nextEpoch`): 0 after the final epoch, 1 after the
    largest int32."""
    if epoch < 0:
        return INITIAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class _Session:
    epoch: int
    partitions: dict[SharePartitionKey, None] = field(default_factory=dict)
    connection: int | None = None


@dataclass(frozen=True, slots=True)
class ClosedSession:
    """A session forgotten with its connection: the member and the partitions it fetched from."""

    group_id: str
    member_id: str
    partitions: tuple[SharePartitionKey, ...]


@dataclass(frozen=True, slots=True)
class SessionContext:
    """What one request may do in its session: the partitions to fetch from (the session's, in the order they
    were added), whether its answer must name every one of them (`full`, the opening request's) and whether it
    closes the session (`final`: its acknowledgements applied, then the member's records released)."""

    partitions: tuple[SharePartitionKey, ...]
    full: bool = False
    final: bool = False


class ShareSessions:
    """Every share session of one listener (see the module docstring); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], _Session] = {}

    def fetch_context(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        partitions: Iterable[SharePartitionKey],
        forgotten: Iterable[SharePartitionKey] = (),
        *,
        acknowledges: bool = False,
        connection: int | None = None,
    ) -> SessionContext:
        """A ShareFetch's session, opened (over the client `connection`), checked and moved on, or closed (see the
        module docstring); raises Kafka's errors, changing nothing then. A closed session is forgotten only by
        `close`, once its acknowledgements were applied."""
        key = (group_id, member_id)
        named = list(dict.fromkeys(partitions))
        with self._lock:
            session = self._sessions.get(key)
            if epoch == FINAL_EPOCH:
                if session is None:
                    raise ShareSessionNotFoundError(f"no share session of member {member_id} in group {group_id}")
                return SessionContext(tuple(session.partitions), final=True)
            if epoch == INITIAL_EPOCH:
                if acknowledges:
                    raise InvalidRequestError("Acknowledge data present in Initial Fetch Request")
                session = _Session(next_epoch(INITIAL_EPOCH), dict.fromkeys(named), connection)
                self._sessions[key] = session
                return SessionContext(tuple(session.partitions), full=True)
            session = self._checked(key, epoch)
            for partition in forgotten:
                session.partitions.pop(partition, None)
            session.partitions.update(dict.fromkeys(named))
            session.epoch = next_epoch(epoch)
            return SessionContext(tuple(session.partitions))

    def acknowledge_context(self, group_id: str, member_id: str, epoch: int) -> SessionContext:
        """A ShareAcknowledge's session, checked and moved on, or to close (see the module docstring)."""
        key = (group_id, member_id)
        with self._lock:
            if epoch == INITIAL_EPOCH:
                raise InvalidShareSessionEpochError("a share acknowledgement may not open a share session (epoch 0)")
            if epoch == FINAL_EPOCH:
                session = self._sessions.get(key)
                if session is None:
                    raise ShareSessionNotFoundError(f"no share session of member {member_id} in group {group_id}")
                return SessionContext(tuple(session.partitions), final=True)
            session = self._checked(key, epoch)
            session.epoch = next_epoch(epoch)
            return SessionContext(tuple(session.partitions))

    def close(self, group_id: str, member_id: str) -> tuple[SharePartitionKey, ...]:
        """Forgets the member's session; the partitions it held (whose records the caller releases)."""
        with self._lock:
            session = self._sessions.pop((group_id, member_id), None)
        return () if session is None else tuple(session.partitions)

    def disconnected(self, connection: int) -> list[ClosedSession]:
        """Forgets the sessions the closed client `connection` opened; what each member held (its records are the
        caller's to release)."""
        with self._lock:
            gone = [key for key, session in self._sessions.items() if session.connection == connection]
            return [ClosedSession(*key, tuple(self._sessions.pop(key).partitions)) for key in gone]

    def epoch(self, group_id: str, member_id: str) -> int | None:
        """The epoch the member's next request must carry; None without a session."""
        with self._lock:
            session = self._sessions.get((group_id, member_id))
            return None if session is None else session.epoch

    def _checked(self, key: tuple[str, str], epoch: int) -> _Session:
        session = self._sessions.get(key)
        if session is None:
            raise ShareSessionNotFoundError(f"no share session of member {key[1]} in group {key[0]}")
        if session.epoch != epoch:
            raise InvalidShareSessionEpochError(f"expected share session epoch {session.epoch}, but got {epoch}")
        return session
