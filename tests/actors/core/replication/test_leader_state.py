"""`LeaderState`, the leader's view of its followers: the high watermark (never above what any in-sync replica
has), Kafka's lastCaughtUpTime rule, ISR shrink after `replica.lag.time.max.ms` and expand once a follower reaches
the high watermark and its epoch's start, one AlterPartition ask at a time, and replicas moved by the controller.
Times are plain milliseconds handed in, as the partition actor hands in its clock."""

from __future__ import annotations

import random

import pytest

from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.replication.leader_state import PENDING_TIMEOUT_MS, LeaderState

LAG_MS = 30_000  # Kafka's replica.lag.time.max.ms default
ELECTED_MS = 1_000


def partition(isr: tuple[str, ...] = ("a", "b", "c"), replicas: tuple[str, ...] = ("a", "b", "c")) -> LeaderAndIsr:
    return LeaderAndIsr("t", 0, "a", 2, replicas, isr, 4)


def leading(isr: tuple[str, ...] = ("a", "b", "c"), epoch_start: int = 0) -> LeaderState:
    """Broker a leading `isr`, elected at ELECTED_MS."""
    return LeaderState("a", partition(isr), epoch_start, ELECTED_MS)


# --- the high watermark -----------------------------------------------------------------------------------------


def test_high_watermark_is_the_smallest_log_end_offset_in_the_isr():
    leader = leading()
    leader.follower_fetched("b", 7, 10, 1_100)
    leader.follower_fetched("c", 5, 10, 1_100)
    assert leader.high_watermark(10) == 5


def test_high_watermark_counts_the_leaders_own_log_end_offset():
    leader = leading()
    leader.follower_fetched("b", 9, 9, 1_100)
    leader.follower_fetched("c", 9, 9, 1_100)
    assert leader.high_watermark(4) == 4


def test_high_watermark_of_a_leader_alone_in_the_isr_is_its_log_end_offset():
    assert leading(("a",)).high_watermark(12) == 12


def test_high_watermark_waits_for_an_in_sync_follower_that_has_not_fetched():
    leader = leading()
    leader.follower_fetched("b", 10, 10, 1_100)
    assert leader.high_watermark(10) == 0


def test_high_watermark_ignores_followers_outside_the_isr():
    leader = leading(("a", "b"))
    leader.follower_fetched("b", 8, 10, 1_100)
    leader.follower_fetched("c", 1, 10, 1_100)
    assert leader.high_watermark(10) == 8


@pytest.mark.parametrize("seed", range(50))
def test_high_watermark_never_exceeds_what_an_in_sync_replica_has(seed: int):
    rng = random.Random(seed)
    isr = ("a", *rng.sample(["b", "c", "d"], rng.randint(0, 3)))
    leader = LeaderState("a", partition(isr, ("a", "b", "c", "d")), 0, 0)
    has = dict.fromkeys(["b", "c", "d"], 0)  # oracle: what each follower holds (nothing until it fetches)
    leader_end = 0
    for now_ms in range(1, 200):
        if rng.random() < 0.4:
            leader_end += rng.randint(1, 5)
        node = rng.choice(["b", "c", "d"])
        has[node] = rng.randint(has[node], leader_end)
        leader.follower_fetched(node, has[node], leader_end, now_ms)
        high_watermark = leader.high_watermark(leader_end)
        assert 0 <= high_watermark <= leader_end
        assert all(high_watermark <= has[member] for member in isr if member != "a")
        assert high_watermark == min([leader_end, *(has[member] for member in isr if member != "a")])


def test_high_watermark_waits_for_a_follower_whose_isr_expansion_is_pending():
    leader = leading(("a", "b"))
    leader.follower_fetched("b", 5, 5, 1_100)
    leader.follower_fetched("c", 5, 5, 1_100)
    assert leader.isr_to_expand(leader.high_watermark(5), 1_100) == ("a", "b", "c")
    # The leader appends 5 more; b fetches them, c has not yet while the controller answers.
    leader.follower_fetched("b", 10, 10, 1_200)
    assert leader.high_watermark(10) <= leader.follower_log_end_offset("c")


# --- Kafka's lastCaughtUpTime ----------------------------------------------------------------------------------


def test_a_follower_fetching_at_the_leader_log_end_is_caught_up_at_that_fetch():
    leader = leading()
    leader.follower_fetched("b", 10, 10, 5_000)
    leader.follower_fetched("c", 10, 10, 5_000)
    # Then the leader appends; b stops fetching for the whole lag.
    assert leader.isr_to_shrink(20, LAG_MS, 5_000 + LAG_MS) is None
    assert leader.isr_to_shrink(20, LAG_MS, 5_000 + LAG_MS + 1) == ("a",)


def test_a_fetch_reaching_the_leader_log_end_of_the_previous_fetch_is_caught_up_as_of_that_previous_fetch():
    leader = leading(("a", "b"))
    leader.follower_fetched("b", 5, 10, 4_000)  # behind: the leader was at 10
    leader.follower_fetched("b", 10, 20, 20_000)  # reaches 10, the leader's end at 4_000, not 20
    assert leader.isr_to_shrink(20, LAG_MS, 4_000 + LAG_MS) is None
    assert leader.isr_to_shrink(20, LAG_MS, 4_000 + LAG_MS + 1) == ("a",)


def test_a_fetch_short_of_the_leader_log_end_of_the_previous_fetch_is_not_caught_up():
    leader = leading(("a", "b"))
    leader.follower_fetched("b", 5, 10, 4_000)
    leader.follower_fetched("b", 9, 20, 20_000)
    # Caught up last at the election.
    assert leader.isr_to_shrink(20, LAG_MS, ELECTED_MS + LAG_MS) is None
    assert leader.isr_to_shrink(20, LAG_MS, ELECTED_MS + LAG_MS + 1) == ("a",)


def test_a_follower_that_stops_gaining_stays_caught_up_as_of_its_last_catch_up():
    leader = leading(("a", "b"))
    leader.follower_fetched("b", 10, 10, 9_000)  # at the leader's end: caught up at 9_000
    leader.follower_fetched("b", 10, 15, 9_500)  # reaches 10, the end at 9_000's fetch: caught up as of 9_000
    leader.follower_fetched("b", 10, 15, 9_600)  # short of 15, the end at 9_500's fetch: no later catch-up
    assert leader.isr_to_shrink(15, LAG_MS, 9_000 + LAG_MS) is None
    assert leader.isr_to_shrink(15, LAG_MS, 9_000 + LAG_MS + 1) == ("a",)


def test_every_follower_counts_as_caught_up_at_the_election():
    leader = leading()
    assert leader.isr_to_shrink(0, LAG_MS, ELECTED_MS + LAG_MS) is None
    # A follower that never fetches leaves after the lag, even of an empty log (its end is unknown, not 0).
    assert leader.isr_to_shrink(0, LAG_MS, ELECTED_MS + LAG_MS + 1) == ("a",)


def test_follower_fetched_by_a_node_that_is_no_follower_is_refused():
    leader = leading()
    assert not leader.follower_fetched("z", 3, 10, 1_100)
    assert not leader.follower_fetched("a", 3, 10, 1_100)
    assert leader.follower_fetched("b", 3, 10, 1_100)
    assert leader.follower_log_end_offset("b") == 3
    assert leader.follower_log_end_offset("z") == -1
    assert leader.follower_log_end_offset("c") == -1


# --- shrinking the ISR -------------------------------------------------------------------------------------------


def test_isr_to_shrink_drops_only_the_followers_not_caught_up_for_the_lag():
    leader = leading()
    leader.follower_fetched("b", 10, 10, 2_000)
    leader.follower_fetched("c", 10, 10, 40_000)
    assert leader.isr_to_shrink(10 + 1, LAG_MS, 40_000) == ("a", "c")


def test_isr_to_shrink_keeps_a_follower_at_the_leader_log_end_however_long_ago_it_caught_up():
    leader = leading()
    leader.follower_fetched("b", 10, 10, 2_000)
    leader.follower_fetched("c", 10, 10, 2_000)
    # No new records for ten lags: both still have everything.
    assert leader.isr_to_shrink(10, LAG_MS, 2_000 + 10 * LAG_MS) is None


def test_isr_to_shrink_never_drops_the_leader():
    assert leading(("a",)).isr_to_shrink(50, LAG_MS, 10 * LAG_MS) is None


def test_isr_to_shrink_ignores_followers_outside_the_isr():
    leader = leading(("a", "b"))
    leader.follower_fetched("b", 10, 10, 40_000)
    assert leader.isr_to_shrink(10, LAG_MS, 40_000) is None


# --- expanding the ISR -------------------------------------------------------------------------------------------


def test_isr_to_expand_adds_a_follower_that_reached_the_high_watermark_in_assignment_order():
    leader = leading(("a", "c"))
    leader.follower_fetched("b", 6, 9, 1_100)
    assert leader.isr_to_expand(6, 1_100) == ("a", "b", "c")


def test_isr_to_expand_waits_for_the_high_watermark():
    leader = leading(("a", "c"))
    leader.follower_fetched("b", 5, 9, 1_100)
    assert leader.isr_to_expand(6, 1_100) is None


def test_isr_to_expand_waits_for_the_start_of_the_leaders_epoch():
    leader = leading(("a", "c"), epoch_start=8)
    leader.follower_fetched("b", 6, 9, 1_100)
    assert leader.isr_to_expand(6, 1_100) is None
    leader.follower_fetched("b", 8, 9, 1_200)
    assert leader.isr_to_expand(6, 1_200) == ("a", "b", "c")


def test_isr_to_expand_never_adds_a_follower_that_has_not_fetched():
    assert leading(("a",)).isr_to_expand(0, 1_100) is None


def test_isr_to_expand_with_everyone_in_sync_asks_nothing():
    leader = leading()
    leader.follower_fetched("b", 10, 10, 1_100)
    assert leader.isr_to_expand(0, 1_100) is None


# --- one ask at a time -------------------------------------------------------------------------------------------


def expand_pending() -> LeaderState:
    leader = leading(("a",))
    leader.follower_fetched("b", 0, 0, 2_000)
    leader.follower_fetched("c", 0, 0, 2_000)
    assert leader.isr_to_expand(0, 2_000) == ("a", "b", "c")
    return leader


def test_a_pending_change_blocks_the_next_ask_until_the_timeout():
    leader = expand_pending()
    assert leader.isr_to_expand(0, 2_000 + PENDING_TIMEOUT_MS - 1) is None
    assert leader.isr_to_expand(0, 2_000 + PENDING_TIMEOUT_MS) == ("a", "b", "c")


def test_a_pending_expansion_blocks_a_shrink_until_the_timeout():
    leader = leading(("a", "b"))
    leader.follower_fetched("c", 0, 0, 2_000)
    assert leader.isr_to_expand(0, 2_000) == ("a", "b", "c")
    # b never fetched: it lags from ELECTED_MS + LAG_MS + 1 on, but the expansion is still unanswered. The shrink
    # asked then asks for c again: it may be in the controller's ISR already.
    assert leader.isr_to_shrink(5, LAG_MS, 2_000 + PENDING_TIMEOUT_MS - 1) is None
    assert leader.isr_to_shrink(5, LAG_MS, ELECTED_MS + LAG_MS + 1) == ("a", "c")


# b stops fetching at 5 and lags from then on: the leader asks to shrink it away at SHRINK_AT.
SHRINK_AT = 1_100 + LAG_MS + 1


def c_asked_for_and_unanswered() -> LeaderState:
    """a leads a and b, both at 5; c reaches 5 and is asked into the ISR, and the controller's answer never comes."""
    leader = leading(("a", "b"))
    leader.follower_fetched("b", 5, 5, 1_100)
    leader.follower_fetched("c", 5, 5, 1_100)
    assert leader.isr_to_expand(5, 1_100) == ("a", "b", "c")
    return leader


def test_an_unanswered_expansion_holds_the_high_watermark_through_a_later_ask():
    """c's expansion gets no answer (the controller took it, its push is late): after the timeout the leader asks
    for a shrink of b, and c, perhaps in the controller's ISR and so electable, still holds the high watermark."""
    leader = c_asked_for_and_unanswered()
    leader.follower_fetched("c", 8, 8, SHRINK_AT - 10)
    assert leader.isr_to_shrink(8, LAG_MS, SHRINK_AT) == ("a", "c")
    assert leader.high_watermark(12) == 5, "b has 5: it is still in the ISR until the answer"
    leader.update(partition(("a", "c")), SHRINK_AT + 5)
    assert leader.high_watermark(12) == 8, "c has 8"


def test_a_refused_ask_drops_the_unanswered_joiners_it_asked_for_again():
    """c's expansion is unanswered; the shrink asked after the timeout carries c again, and the controller refuses
    it (c's broker is gone): c no longer counts in the high watermark, nor is asked for before it fetches again."""
    leader = c_asked_for_and_unanswered()
    leader.follower_fetched("c", 5, 5, SHRINK_AT - 10)
    asked = leader.isr_to_shrink(9, LAG_MS, SHRINK_AT)
    assert asked == ("a", "c")
    leader.follower_fetched("b", 9, 9, SHRINK_AT + 1)
    assert leader.high_watermark(9) == 5, "c, asked for and not answered, counts"
    assert leader.refused(asked)
    assert leader.high_watermark(9) == 9, "refused: c no longer counts"
    assert leader.isr_to_expand(5, SHRINK_AT + PENDING_TIMEOUT_MS) is None, "not asked for until it fetches again"
    leader.follower_fetched("c", 9, 9, SHRINK_AT + PENDING_TIMEOUT_MS)
    assert leader.isr_to_expand(9, SHRINK_AT + PENDING_TIMEOUT_MS) == ("a", "b", "c")


def test_the_controllers_answer_ends_the_pending_change():
    leader = expand_pending()
    leader.update(partition(("a", "b")), 2_100)  # the controller took b only so far
    assert leader.state.isr == ("a", "b")
    assert leader.isr_to_expand(0, 2_100) == ("a", "b", "c")


# --- a newer state from the controller -----------------------------------------------------------------------------


def test_update_tracks_a_replica_moved_to_a_new_node_and_drops_the_old_one():
    leader = leading(("a", "b"))
    leader.follower_fetched("c", 5, 10, 1_100)
    moved = partition(("a", "b")).with_replica_moved("c", "d")
    leader.update(moved, 3_000)
    assert not leader.follower_fetched("c", 6, 10, 3_100)
    assert leader.follower_log_end_offset("c") == -1
    assert leader.follower_log_end_offset("d") == -1
    assert leader.follower_fetched("d", 10, 10, 3_100)
    assert leader.isr_to_expand(10, 3_100) == ("a", "b", "d")


def test_update_keeps_the_progress_of_replicas_that_stay():
    leader = leading()
    leader.follower_fetched("b", 7, 10, 1_100)
    leader.follower_fetched("c", 9, 10, 1_100)
    leader.update(partition(("a", "b", "c")).with_isr(("a", "b")), 1_200)
    assert (leader.follower_log_end_offset("b"), leader.follower_log_end_offset("c")) == (7, 9)
    assert leader.high_watermark(10) == 7


def test_a_moved_in_sync_replica_holds_the_high_watermark_back_until_it_fetches():
    leader = leading()
    leader.follower_fetched("b", 10, 10, 1_100)
    leader.follower_fetched("c", 10, 10, 1_100)
    leader.update(partition().with_replica_moved("c", "d"), 2_000)
    assert leader.high_watermark(10) == 0
    leader.follower_fetched("d", 10, 10, 2_100)
    assert leader.high_watermark(10) == 10


def test_a_moved_replica_is_caught_up_from_when_it_is_tracked():
    leader = leading()
    leader.update(partition().with_replica_moved("c", "d"), 50_000)
    leader.follower_fetched("b", 10, 10, 50_000 + LAG_MS)
    assert leader.isr_to_shrink(10, LAG_MS, 50_000 + LAG_MS) is None
    assert leader.isr_to_shrink(10, LAG_MS, 50_000 + LAG_MS + 1) == ("a", "b")


def test_a_follower_the_controller_removed_rejoins_only_after_fetching_again():
    """A follower whose broker died had everything: the controller takes it out of the ISR, and until it fetches
    again it is not proposed back, so the high watermark never waits on it (Kafka's `isReplicaIsrEligible`)."""
    leader = leading()
    leader.follower_fetched("b", 10, 10, 1_100)
    leader.follower_fetched("c", 10, 10, 1_100)
    leader.update(partition(("a", "b")), 1_200)
    leader.follower_fetched("b", 12, 12, 1_300)
    assert leader.isr_to_expand(10, 1_300) is None
    assert leader.high_watermark(12) == 12
    leader.follower_fetched("c", 12, 12, 1_400)
    assert leader.isr_to_expand(12, 1_400) == ("a", "b", "c")
