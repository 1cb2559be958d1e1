"""A listener's metadata cache (`cluster.protocol.views.metadata_cache`, a `BrokerView` with `metadata_cache`): the
controller's answers are kept while its metadata does not change, a change made elsewhere is seen once the
controller's wait returns, the listener's own change at once, and nothing is kept while no wait is in place. The
oracle is the in-process broker's controller itself (its calls counted, its state changed directly as another
listener's request would change it). No Ray: the in-process transport runs the controller's calls on worker
threads, as Ray runs them on the actor's."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.views import broker_view
from cluster.protocol.views.broker_view import BrokerEndpoint, BrokerView, advertised
from cluster.protocol.views.in_process_broker_view import InProcessPartitions
from cluster.protocol.views.metadata_cache import MetadataCache
from cluster.protocol.views.transport import InProcessTransport
from storage.errors import BrokerNotAvailableError
from tests.cluster.protocol.helpers import run

# How long a change made elsewhere may take to be seen (the wait's return, a thread hop).
SEEN_WITHIN_S = 2.0


class WatchedController:
    """The in-process broker's controller, counting the calls the view makes; with `watch_fails` set, its wait for
    a change raises as a controller gone away would, and a wait's answer comes `watch_delay_s` late. A method named
    in `late_s` answers that many seconds after it read the controller's state, as a busy controller's answer does."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._controller = broker.controller
        self.calls: Counter[str] = Counter()
        self.watch_fails = threading.Event()
        self.watch_delay_s = 0.0
        self.late_s: dict[str, float] = {}

    def __getattr__(self, method: str) -> object:
        self.calls[method] += 1
        if method == "await_metadata_change":
            return self._await_metadata_change
        bound = getattr(self._controller, method)
        late_s = self.late_s.get(method)
        if late_s is None:
            return bound

        def answered_late(*args: object) -> object:
            answer = bound(*args)
            time.sleep(late_s)
            return answer

        return answered_late

    def _await_metadata_change(self, known: int | None, max_wait_ms: int) -> int:
        if self.watch_fails.is_set():
            raise BrokerNotAvailableError("the controller is gone")
        count = self._controller.await_metadata_change(known, max_wait_ms)
        time.sleep(self.watch_delay_s)
        return count


def cached_view(broker: InProcessBroker) -> tuple[BrokerView, WatchedController]:
    controller = WatchedController(broker)
    transport = InProcessTransport(lambda: controller)
    view = BrokerView(transport, InProcessPartitions(broker), "node-0", metadata_cache=True)
    return view, controller


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + SEEN_WITHIN_S
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"{what} not within {SEEN_WITHIN_S} s"
        await asyncio.sleep(0.01)


async def answered_from_cache(view: BrokerView, controller: WatchedController, topic: str) -> bool:
    """Whether two questions in a row about `topic` made no call to the controller (the first may fill the
    cache)."""
    await view.topic(topic)
    before = controller.calls["describe_topic"]
    await view.topic(topic)
    return controller.calls["describe_topic"] == before


async def kept_topic(view: BrokerView, controller: WatchedController, partitions: int) -> None:
    """Creates topic "t" with `partitions` through `view`, and returns once the view answers it from its cache."""
    await view.create_topic("t", partitions)
    await until(lambda: answered_from_cache(view, controller, "t"), "an answer from the cache")


def test_answers_are_kept_until_the_controller_changes_and_a_change_elsewhere_is_seen(
    broker: InProcessBroker,
) -> None:
    view, controller = cached_view(broker)

    async def scenario() -> None:
        await kept_topic(view, controller, 2)
        asked = Counter(controller.calls)
        assert (await view.topic("t")).partition_count == 2
        assert await view.brokers() == await view.brokers()
        await view.topics()
        await view.topics()
        assert controller.calls["describe_topic"] == asked["describe_topic"]
        assert controller.calls["topics"] - asked["topics"] <= 1
        # Another listener's change, straight at the controller: seen once the wait returns, and kept again after.
        await asyncio.to_thread(broker.controller.add_partitions, "t", 5)

        async def grown() -> bool:
            return (await view.topic("t")).partition_count == 5

        await until(grown, "the partitions added elsewhere")
        await until(lambda: answered_from_cache(view, controller, "t"), "the new answer from the cache")
        assert (await view.topic("t")).partition_count == 5

    run(scenario())


def test_the_listeners_own_change_is_seen_by_its_next_request(broker: InProcessBroker) -> None:
    view, controller = cached_view(broker)

    async def scenario() -> None:
        await kept_topic(view, controller, 2)
        # The controller's news of the change comes late: only the listener's own emptying can show it at once.
        controller.watch_delay_s = 1.0
        await view.create_partitions("t", 3)
        assert (await view.topic("t")).partition_count == 3
        await view.delete_topic("t")
        assert "t" not in await view.topics()

    run(scenario())


def test_nothing_is_kept_while_no_wait_for_the_controllers_changes_is_in_place(broker: InProcessBroker) -> None:
    view, controller = cached_view(broker)

    async def scenario() -> None:
        await kept_topic(view, controller, 1)
        controller.watch_fails.set()
        # The wait in place returns at this change; the next one fails, and the cache stops keeping answers.
        await asyncio.to_thread(broker.controller.add_partitions, "t", 2)
        await waited_again(controller, "a failed wait")
        for total in (3, 4):
            await asyncio.to_thread(broker.controller.add_partitions, "t", total)
            assert (await view.topic("t")).partition_count == total
            assert not await answered_from_cache(view, controller, "t")
        controller.watch_fails.clear()
        await until(lambda: answered_from_cache(view, controller, "t"), "answers kept once a wait is in place again")

    run(scenario())


def test_a_withdrawn_listener_stops_its_wait_and_keeps_nothing(broker: InProcessBroker) -> None:
    view, controller = cached_view(broker)

    async def scenario() -> None:
        endpoint = BrokerEndpoint(1, "127.0.0.1", 9092)
        await view.announce(endpoint)
        await kept_topic(view, controller, 1)
        await view.withdraw(endpoint)
        waits = controller.calls["await_metadata_change"]
        assert not await answered_from_cache(view, controller, "t")
        await asyncio.sleep(0.2)
        assert controller.calls["await_metadata_change"] == waits
        assert not [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]

    run(scenario())


async def waited_again(controller: WatchedController, what: str = "the wait's return") -> None:
    """Returns once the view asked the controller for another wait for a change: the wait in place when this was
    called has returned, so a change the controller made before this call has emptied the cache."""
    before = controller.calls["await_metadata_change"]

    async def again() -> bool:
        return controller.calls["await_metadata_change"] > before

    await until(again, what)


def test_a_last_answer_given_in_the_silent_controllers_place_is_not_kept(
    broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    view, controller = cached_view(broker)
    monkeypatch.setattr(broker_view, "KNOWN_ANSWER_WAIT_S", 0.2)

    async def scenario() -> None:
        await kept_topic(view, controller, 2)
        controller.late_s["describe_topic"] = 1.0
        await asyncio.to_thread(broker.controller.add_partitions, "t", 3)
        await waited_again(controller)
        # The controller silent past the wait: the listener answers with the last answer it was given ...
        assert (await view.topic("t")).partition_count == 2
        # ... and asks again next time, so the change is seen as soon as the controller answers.
        del controller.late_s["describe_topic"]
        assert (await view.topic("t")).partition_count == 3

    run(scenario())


def test_a_shared_question_asked_after_a_change_never_takes_the_answer_of_a_call_begun_before_it(
    broker: InProcessBroker,
) -> None:
    view, controller = cached_view(broker)
    endpoint = BrokerEndpoint(1, "127.0.0.1", 9092)

    async def scenario() -> None:
        await kept_topic(view, controller, 1)
        assert await view.brokers() == []
        # Emptied by a change, so that the next question is asked of the controller.
        await asyncio.to_thread(broker.controller.add_partitions, "t", 2)
        await waited_again(controller)
        controller.late_s["listeners"] = 0.5
        before_the_change = asyncio.ensure_future(view.brokers())
        await asyncio.sleep(0.1)
        await asyncio.to_thread(broker.controller.register_listener, "node-1", advertised(endpoint))
        await waited_again(controller)
        assert await view.brokers() == [endpoint]
        assert await before_the_change == []
        assert await view.brokers() == [endpoint]

    run(scenario())


class HeldWaits:
    """A controller whose waits for a change are futures the test answers (`answer_wait`), and that answers nothing
    else."""

    def __init__(self) -> None:
        self.waits: list[asyncio.Future[int]] = []

    async def call(self, method: str, *args: object) -> object:
        assert method == "await_metadata_change", method
        wait: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waits.append(wait)
        return await wait


def test_a_close_in_the_turn_its_wait_is_answered_stops_the_watch() -> None:
    controller = HeldWaits()
    cache = MetadataCache(controller)

    async def scenario() -> None:
        cache.generation()
        await until_true(lambda: len(controller.waits) == 1)
        controller.waits[0].set_result(1)
        await until_true(lambda: cache.watching)
        controller.waits[1].set_result(2)
        # No turn of the loop between the answer and the close: the watch must stop all the same.
        async with asyncio.timeout(SEEN_WITHIN_S):
            await cache.close()
        assert len(controller.waits) == 2
        assert not cache.watching

    run(scenario())


async def until_true(condition: Callable[[], bool]) -> None:
    async def asynchronous() -> bool:
        return condition()

    await until(asynchronous, "the condition")
