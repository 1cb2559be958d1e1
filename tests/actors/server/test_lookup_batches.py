"""`LookupBatches` on a real event loop, with a plain function as the bulk lookup (no Ray): the gets of one loop
pass make one lookup, each waiter gets its key's answer or error, a key asked for while its batch runs waits for
that batch, a failing lookup fails every waiter of its batch, and a cancelled waiter leaves the answer to the
others."""

from __future__ import annotations

import asyncio
import threading

import pytest

from actors.server.lookup_batches import LookupBatches
from storage.errors import UnknownTopicOrPartitionError


class Squares:
    """A bulk lookup answering each key's square, an error for negative keys; records each call's keys."""

    def __init__(self, release: threading.Event | None = None) -> None:
        self.calls: list[list[int]] = []
        self._release = release

    def __call__(self, keys: list[int]) -> dict[int, int | BaseException]:
        self.calls.append(sorted(keys))
        if self._release is not None:
            self._release.wait(5)
        return {key: UnknownTopicOrPartitionError(f"no key {key}") if key < 0 else key * key for key in keys}


def test_the_gets_of_one_pass_make_one_lookup_and_each_gets_its_answer() -> None:
    squares = Squares()

    async def main() -> list[int | BaseException]:
        batches: LookupBatches[int, int] = LookupBatches(squares)
        return list(await asyncio.gather(*(batches.get(key) for key in (3, 1, -2, 3)), return_exceptions=True))

    answers = asyncio.run(main())
    assert squares.calls == [[-2, 1, 3]]
    assert answers[0] == 9 and answers[1] == 1 and answers[3] == 9
    assert isinstance(answers[2], UnknownTopicOrPartitionError)


def test_a_key_asked_while_its_batch_runs_waits_for_it_and_a_later_pass_makes_a_new_batch() -> None:
    release = threading.Event()
    squares = Squares(release)

    async def main() -> tuple[int, int, int]:
        batches: LookupBatches[int, int] = LookupBatches(squares)
        first = asyncio.ensure_future(batches.get(2))
        await asyncio.sleep(0.05)  # the batch of 2 runs now, held by `release`
        again = asyncio.ensure_future(batches.get(2))
        other = asyncio.ensure_future(batches.get(5))
        await asyncio.sleep(0.05)
        release.set()
        return await first, await again, await other

    assert asyncio.run(main()) == (4, 4, 25)
    assert sorted(squares.calls) == [[2], [5]]


def test_a_failing_lookup_fails_every_waiter_of_its_batch() -> None:
    def broken(keys: list[int]) -> dict[int, int | BaseException]:
        raise RuntimeError("the controller is gone")

    async def main() -> list[int | BaseException]:
        batches: LookupBatches[int, int] = LookupBatches(broken)
        return list(await asyncio.gather(batches.get(1), batches.get(2), return_exceptions=True))

    answers = asyncio.run(main())
    assert [str(answer) for answer in answers] == ["the controller is gone"] * 2


def test_a_cancelled_waiter_leaves_the_answer_to_the_others() -> None:
    release = threading.Event()
    squares = Squares(release)

    async def main() -> int:
        batches: LookupBatches[int, int] = LookupBatches(squares)
        abandoned = asyncio.ensure_future(batches.get(7))
        kept = asyncio.ensure_future(batches.get(7))
        await asyncio.sleep(0.05)
        abandoned.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        return await kept

    assert asyncio.run(main()) == 49
