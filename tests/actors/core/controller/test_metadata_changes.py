"""The controller's count of the changes a Metadata answer shows (`actors.core.controller.metadata_changes`), which
the Kafka listeners' metadata caches watch: the oracle is what Metadata shows (the topics and their partitions'
states, the running brokers, the listeners): each change of it moves the count, a question does not, and a wait
returns only once the change it saw is in place. Plain controller over real log managers, no Ray."""

from __future__ import annotations

import threading
import time

from actors.core.controller.metadata_changes import MetadataChanges
from actors.core.controller.topic_metadata import AdvertisedListener
from tests.actors.core.controller.test_controller import NODES, Cluster, cluster

__all__ = ["cluster"]


def test_a_wait_for_no_known_count_answers_at_once_and_one_without_a_change_after_its_time() -> None:
    changes = MetadataChanges()
    count = changes.after(None, 10_000)
    started = time.monotonic()
    assert changes.after(count, 100) == count
    assert time.monotonic() - started >= 0.09


def test_a_change_wakes_every_waiter_with_the_new_count() -> None:
    changes = MetadataChanges()
    count = changes.count
    seen: list[int] = []
    waiters = [threading.Thread(target=lambda: seen.append(changes.after(count, 10_000))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.05)
    changes.note()
    for waiter in waiters:
        waiter.join(5)
    assert seen == [count + 1] * 3


def test_two_controllers_start_their_counts_apart() -> None:
    assert MetadataChanges().count != MetadataChanges().count


def test_each_change_metadata_shows_moves_the_count_and_a_question_does_not(cluster: Cluster) -> None:
    controller = cluster.controller

    def moved_by(change: object) -> bool:
        before = controller.await_metadata_change(None, 0)
        assert callable(change)
        change()
        return controller.await_metadata_change(None, 0) != before

    assert moved_by(lambda: controller.create_topic("t", 2, replication_factor=2))
    assert moved_by(lambda: controller.add_partitions("t", 3))
    assert moved_by(lambda: controller.set_topic_config("t", {"retention.ms": "1000"}))
    listener = AdvertisedListener(1, "host-a", 9092)
    assert moved_by(lambda: controller.register_listener(NODES[0], listener))
    assert not moved_by(lambda: controller.register_listener(NODES[0], listener))
    assert moved_by(lambda: controller.unregister_listener(NODES[0], listener))
    assert not moved_by(lambda: (controller.describe_topic("t"), controller.topics(), controller.brokers()))
    assert moved_by(lambda: controller.broker_lost(NODES[2]))
    assert NODES[2] not in controller.brokers()
    assert moved_by(lambda: cluster.register(NODES[2]))
    assert moved_by(lambda: controller.delete_topic("t"))


def test_a_wait_returns_once_a_change_made_meanwhile_is_in_place(cluster: Cluster) -> None:
    controller = cluster.controller
    answers: list[tuple[int, int]] = []

    def wait_then_describe() -> None:
        count = controller.await_metadata_change(known, 10_000)
        answers.append((count, len(controller.describe_topic("grown").partitions)))

    controller.create_topic("grown", 1)
    known = controller.await_metadata_change(None, 0)
    waiter = threading.Thread(target=wait_then_describe)
    started = time.monotonic()
    waiter.start()
    time.sleep(0.1)
    controller.add_partitions("grown", 4)
    waiter.join(10)
    ((count, partitions),) = answers
    assert count != known and partitions == 4
    assert time.monotonic() - started < 5
