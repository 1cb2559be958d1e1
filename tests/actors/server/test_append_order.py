"""`AppendOrder`: submissions happen in the order the turns were taken, per key, whatever each append awaits
before it submits, also when a waiting append is cancelled; keys do not wait on each other. The oracle is the
order in which the turns were taken."""

from __future__ import annotations

import asyncio

from actors.server.append_order import AppendOrder

STEP_S = 0.005


async def submit(order: AppendOrder, key: str, tag: int, wait_s: float, submitted: list[tuple[str, int]]) -> None:
    """One append: its turn taken at once, then `wait_s` of awaiting in its place, then its submission."""
    async with order.turn(key):
        await asyncio.sleep(wait_s)
        submitted.append((key, tag))


def test_submissions_follow_the_turns_when_the_first_appends_wait_longest() -> None:
    submitted: list[tuple[str, int]] = []

    async def main() -> None:
        order = AppendOrder()
        await asyncio.gather(*(submit(order, "p", tag, (10 - tag) * STEP_S, submitted) for tag in range(10)))

    asyncio.run(main())
    assert submitted == [("p", tag) for tag in range(10)]


def test_keys_keep_their_own_order_and_do_not_wait_for_each_other() -> None:
    submitted: list[tuple[str, int]] = []

    async def main() -> None:
        order = AppendOrder()
        slow = asyncio.gather(*(submit(order, "slow", tag, 20 * STEP_S, submitted) for tag in range(2)))
        fast = asyncio.gather(*(submit(order, "fast", tag, 0, submitted) for tag in range(3)))
        await asyncio.gather(slow, fast)

    asyncio.run(main())
    assert submitted == [("fast", 0), ("fast", 1), ("fast", 2), ("slow", 0), ("slow", 1)]


def test_a_cancelled_append_lets_the_next_go_only_after_the_ones_before_it() -> None:
    submitted: list[tuple[str, int]] = []

    async def main() -> None:
        order = AppendOrder()
        first = asyncio.ensure_future(submit(order, "p", 0, 10 * STEP_S, submitted))
        second = asyncio.ensure_future(submit(order, "p", 1, 0, submitted))
        third = asyncio.ensure_future(submit(order, "p", 2, 0, submitted))
        await asyncio.sleep(STEP_S)
        second.cancel()
        await asyncio.gather(first, third)
        assert second.cancelled()
        # Every turn passed on: a new one goes at once.
        await asyncio.wait_for(submit(order, "p", 3, 0, submitted), timeout=1)

    asyncio.run(main())
    assert submitted == [("p", 0), ("p", 2), ("p", 3)]


def test_an_append_that_fails_before_submitting_passes_its_turn_on() -> None:
    submitted: list[tuple[str, int]] = []

    async def refused(order: AppendOrder) -> None:
        async with order.turn("p"):
            await asyncio.sleep(STEP_S)
            raise ValueError("refused before it was sent")

    async def main() -> list[BaseException | None]:
        order = AppendOrder()
        results = await asyncio.gather(
            submit(order, "p", 0, 2 * STEP_S, submitted),
            refused(order),
            submit(order, "p", 2, 0, submitted),
            return_exceptions=True,
        )
        return list(results)

    results = asyncio.run(main())
    assert [type(result).__name__ for result in results] == ["NoneType", "ValueError", "NoneType"]
    assert submitted == [("p", 0), ("p", 2)]
