"""`HostPlacement` without Ray: partitions fill the lowest-numbered host with room, `spare_processes` hosts holding
nothing are kept started (and only those), a spare is used only once every other host is full, deletes turn a host
back into a spare, hosts found running are reused; then a seeded simulation of creates and deletes checked against
a list-of-sets model after every step."""

from __future__ import annotations

import random

import pytest

from actors.core.host_placement import HostPlacement, PlacedHost
from storage.topic_partition import TopicPartition


class Starter:
    """`start_host` that records which indexes were started (the handle is the index)."""

    def __init__(self) -> None:
        self.started: list[int] = []

    def __call__(self, index: int) -> PlacedHost[int]:
        self.started.append(index)
        return PlacedHost(f"host-{index}", index, {})


def placement(
    per_process: int = 3, spares: int = 1, running: list[PlacedHost[int]] | None = None
) -> tuple[HostPlacement[int], Starter]:
    starter = Starter()
    return HostPlacement(per_process, spares, starter, running), starter


def tp(topic: str, partition: int = 0) -> TopicPartition:
    return (topic, partition)


def held(hosts: list[PlacedHost[int]]) -> list[set[TopicPartition]]:
    return [set(host.partitions) for host in hosts]


def test_a_fresh_node_starts_its_spare_before_any_partition_and_the_first_partition_takes_it() -> None:
    hosts, starter = placement(spares=1)
    assert [h.name for h in hosts.start_spares()] == ["host-0"]
    assert hosts.start_spares() == []  # idempotent: one spare is there
    first = hosts.place(tp("a"), "/d/a-0")
    assert first.handle == 0 and first.partitions == {tp("a"): "/d/a-0"}
    # Host 0 now holds a partition, so host 1 was started as the new spare, holding nothing.
    assert starter.started == [0, 1]
    assert held(hosts.hosts) == [{tp("a")}, set()]


def test_partitions_fill_the_lowest_host_with_room_and_the_spare_only_once_every_other_is_full() -> None:
    hosts, starter = placement(per_process=2, spares=1)
    hosts.start_spares()
    for partition in range(2):
        assert hosts.place(tp("a", partition), "").handle == 0
    # Host 1 stayed the spare while host 0 had room; the third partition takes it and host 2 starts.
    assert starter.started == [0, 1]
    assert hosts.place(tp("a", 2), "").handle == 1
    assert starter.started == [0, 1, 2]
    assert held(hosts.hosts) == [{tp("a", 0), tp("a", 1)}, {tp("a", 2)}, set()]


def test_placing_a_partition_a_host_holds_reuses_that_host_and_records_its_folder() -> None:
    found = PlacedHost("host-0", 0, {tp("a"): ""})
    hosts, starter = placement(running=[found, PlacedHost("host-1", 1, {})])
    assert hosts.place(tp("a"), "/d/a-0") is found and found.partitions == {tp("a"): "/d/a-0"}
    assert starter.started == []


def test_hosts_found_running_are_reused_and_an_empty_one_counts_as_the_spare() -> None:
    running = [PlacedHost("host-0", 0, {tp("a"): ""}), PlacedHost("host-1", 1, {})]
    hosts, starter = placement(running=running)
    assert hosts.start_spares() == []
    assert hosts.place(tp("b"), "").handle == 0
    assert starter.started == []


def test_a_host_emptied_by_deletes_becomes_a_spare_and_no_other_starts() -> None:
    hosts, starter = placement(per_process=2, spares=1)
    hosts.start_spares()
    for partition in range(3):
        hosts.place(tp("a", partition), "")
    assert starter.started == [0, 1, 2]
    assert [h.handle for h in hosts.remove(tp("a", 2))] == [1]
    assert [h.handle for h in hosts.spares()] == [1, 2]
    # The freed host 1 is the lowest with room again: the next partition goes there, host 2 stays the spare.
    assert hosts.place(tp("b"), "").handle == 1
    assert starter.started == [0, 1, 2]
    assert hosts.remove(tp("never-placed")) == []


def test_without_spares_a_host_starts_only_when_every_host_is_full() -> None:
    hosts, starter = placement(per_process=2, spares=0)
    assert hosts.start_spares() == []
    hosts.place(tp("a", 0), "")
    hosts.place(tp("a", 1), "")
    assert starter.started == [0]
    hosts.place(tp("a", 2), "")
    assert starter.started == [0, 1]


def test_several_spares_are_kept() -> None:
    hosts, starter = placement(per_process=2, spares=2)
    hosts.start_spares()
    hosts.place(tp("a"), "")
    assert starter.started == [0, 1, 2]
    assert [h.handle for h in hosts.spares()] == [1, 2]


def test_hosts_hold_at_least_two_partitions() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        HostPlacement(1, 1, Starter())


def test_take_all_hands_every_host_over_once() -> None:
    hosts, _ = placement()
    hosts.start_spares()
    hosts.place(tp("a"), "")
    assert [h.handle for h in hosts.take_all()] == [0, 1]
    assert hosts.hosts == [] and hosts.holding(tp("a")) is None


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("per_process", "spares"), [(2, 0), (3, 1), (4, 2)])
def test_random_creates_and_deletes_match_the_model(seed: int, per_process: int, spares: int) -> None:
    """The model: a list of sets, one per started host; a partition goes to the first set with room (a new set if
    none), then empty sets are appended until `spares` are empty; a delete removes it from its set."""
    rng = random.Random(seed)
    hosts, starter = placement(per_process, spares)
    hosts.start_spares()
    model: list[set[TopicPartition]] = [set() for _ in range(spares)]
    live: list[TopicPartition] = []
    for step in range(300):
        if live and rng.random() < 0.4:
            gone = live.pop(rng.randrange(len(live)))
            hosts.remove(gone)
            next(s for s in model if gone in s).discard(gone)
        else:
            new = tp(f"t{step}", rng.randrange(4))
            live.append(new)
            index = hosts.place(new, f"/d/{step}").handle
            wanted = next((i for i, s in enumerate(model) if len(s) < per_process), len(model))
            if wanted == len(model):
                model.append(set())
            model[wanted].add(new)
            model.extend(set() for _ in range(spares - sum(1 for s in model if not s)))
            assert index == wanted, step
        assert held(hosts.hosts) == model, step
        assert starter.started == list(range(len(model))), step
        assert all(len(s) <= per_process for s in model)
        assert sum(1 for s in model if not s) >= spares
