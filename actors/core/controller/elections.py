"""Leader elections an operator asks for (Kafka's ElectLeaders, `kafka-leader-election.sh`), as plain functions of a
partition's state and the live brokers, with Kafka's outcomes.

- PREFERRED: leadership goes to the partition's first replica. Already leading: ELECTION_NOT_NEEDED; not alive or
  not in the ISR: PREFERRED_LEADER_NOT_AVAILABLE.
- UNCLEAN: for a partition without a live leader only (else ELECTION_NOT_NEEDED). The first live in-sync replica
  leads if there is one (a clean election); otherwise the first live replica leads with an ISR of itself alone,
  whatever it misses of the log (an unclean election: the data only the lost replicas had is gone, which is what
  the operator asked for). No live replica: ELIGIBLE_LEADERS_NOT_AVAILABLE.

The automatic elections (a lost broker's partitions, `auto.leader.rebalance.enable`) are in
`actors.core.controller.assignment`; they never elect uncleanly.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr


class ElectionType(enum.IntEnum):
    """ElectLeaders' `election_type`, with Kafka's codes."""

    PREFERRED = 0
    UNCLEAN = 1


class ElectionError(enum.Enum):
    """One partition's answer to an election asked for, valued as Kafka's error names (the protocol layer maps
    them by name)."""

    NONE = "none"
    ELECTION_NOT_NEEDED = "election_not_needed"
    PREFERRED_LEADER_NOT_AVAILABLE = "preferred_leader_not_available"
    ELIGIBLE_LEADERS_NOT_AVAILABLE = "eligible_leaders_not_available"
    UNKNOWN_TOPIC_OR_PARTITION = "unknown_topic_or_partition"


def requested_election(
    state: LeaderAndIsr, election_type: ElectionType, live: Mapping[str, object]
) -> LeaderAndIsr | ElectionError:
    """The partition's new state after the election asked for, or why there is none (see the module docstring)."""
    if election_type == ElectionType.PREFERRED:
        preferred = state.replicas[0] if state.replicas else NO_LEADER
        if preferred == state.leader:
            return ElectionError.ELECTION_NOT_NEEDED
        if preferred not in state.isr or preferred not in live:
            return ElectionError.PREFERRED_LEADER_NOT_AVAILABLE
        return state.with_leader(preferred, state.isr)
    if state.leader != NO_LEADER and state.leader in live:
        return ElectionError.ELECTION_NOT_NEEDED
    in_sync = next((node for node in state.replicas if node in state.isr and node in live), None)
    if in_sync is not None:
        return state.with_leader(in_sync, state.isr)
    any_live = next((node for node in state.replicas if node in live), None)
    if any_live is None:
        return ElectionError.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return state.with_leader(any_live, (any_live,))
