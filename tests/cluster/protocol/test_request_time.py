"""`TimedCoroutine` (`cluster/protocol/request_time.py`) counts the time a coroutine's steps keep the event loop, not
the time it waits between them, and passes results, errors and cancellation through unchanged."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.protocol.request_time import TimedCoroutine

BUSY_S = 0.03
WAIT_S = 0.3


def busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


async def handler() -> str:
    busy(BUSY_S)
    await asyncio.sleep(WAIT_S)
    busy(BUSY_S)
    return "answer"


def test_the_steps_are_counted_and_the_wait_is_not() -> None:
    async def main() -> tuple[str, int]:
        timer = TimedCoroutine(handler())
        return await timer, timer.elapsed_ns

    answer, elapsed_ns = asyncio.run(main())
    assert answer == "answer"
    assert 2 * BUSY_S <= elapsed_ns / 1e9 < 2 * BUSY_S + WAIT_S / 2


def test_an_error_and_a_cancellation_pass_through() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("refused")

    async def main() -> None:
        with pytest.raises(ValueError, match="refused"):
            await TimedCoroutine(failing())
        cleaned = []

        async def waiting() -> None:
            try:
                await asyncio.sleep(10)
            finally:
                cleaned.append(True)

        task = asyncio.create_task(_awaited(TimedCoroutine(waiting())))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cleaned == [True]

    asyncio.run(main())


async def _awaited(timer: TimedCoroutine[None]) -> None:
    await timer
