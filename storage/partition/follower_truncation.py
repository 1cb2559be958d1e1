"""Where a follower cuts its log before it fetches from a leader: Kafka's OffsetForLeaderEpoch rule.

A follower that starts following (a new leader, or after a restart) asks the leader for the end offset of the
newest epoch in its own leader-epoch-checkpoint. The leader answers `(epoch, end offset)`: the largest epoch it
has that is not above the one asked, and where that epoch ended in its log (`LeaderEpochCache.end_offset_for`).
Everything the follower holds past the point where the two logs part is a tail no leader acknowledged, and goes
(Kafka's `AbstractFetcherThread.getOffsetTruncationState`):

- the leader knows no epoch (end offset -1): cut to the follower's high watermark, the last offset known shared;
- the leader answered with no epoch but an offset (a log written before epochs existed): cut to that offset;
- the follower does not know the leader's epoch itself, or has no entry at or below it: if it has none at all,
  cut to the leader's end offset; else cut to the end of the follower's largest epoch below the leader's, and ask
  again with that epoch (`completed` False), until both name the same epoch;
- both have that epoch: cut to where the earlier of the two ends.

Never past the follower's own log end offset: a cut only ever removes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class TruncationState:
    """Cut the follower's log to `offset`; unless `completed`, ask the leader again for the newest epoch left."""

    offset: int
    completed: bool


def truncation_state(
    leader_epoch: int,
    leader_end_offset: int,
    follower_end_offset_for: Callable[[int], tuple[int, int]],
    follower_log_end_offset: int,
    follower_high_watermark: int,
) -> TruncationState:
    """The cut for the leader's answer `(leader_epoch, leader_end_offset)`; `follower_end_offset_for(epoch)` is the
    follower's own `(epoch, end offset)` for that epoch (`Log.end_offset_for_epoch`). See the module docstring."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return TruncationState(min(follower_high_watermark, follower_log_end_offset), True)
    if leader_epoch == UNDEFINED_EPOCH:
        return TruncationState(min(leader_end_offset, follower_log_end_offset), True)
    follower_epoch, follower_end_offset = follower_end_offset_for(leader_epoch)
    if follower_end_offset == UNDEFINED_EPOCH_OFFSET:
        return TruncationState(min(leader_end_offset, follower_log_end_offset), True)
    if follower_epoch != leader_epoch:
        return TruncationState(min(follower_end_offset, follower_log_end_offset), False)
    return TruncationState(min(follower_end_offset, leader_end_offset, follower_log_end_offset), True)
