"""`RecordFuture`, the future `Producer.send` returns, behaves as the `concurrent.futures.Future` it is (the oracle
is the standard library's own `Future`, driven the same way), though the futures of a batch share one condition
and are answered together. No Ray: the futures are driven directly."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from actors.clients.futures import RecordFuture, RecordMetadata


def metadata(offset: int) -> RecordMetadata:
    return RecordMetadata("t", 0, offset, 1_000 + offset)


def test_a_batch_answered_together_behaves_like_futures_answered_one_by_one() -> None:
    condition = threading.Condition()
    ours = [RecordFuture(condition) for _ in range(5)]
    theirs: list[concurrent.futures.Future[RecordMetadata]] = [concurrent.futures.Future() for _ in range(5)]
    for future in theirs:
        future.set_running_or_notify_cancel()
    called: dict[str, list[int]] = {"ours": [], "theirs": []}
    for name, futures in (("ours", ours), ("theirs", theirs)):
        for future in futures:
            assert not future.done() and future.running() and not future.cancel()
        futures[1].add_done_callback(lambda done, name=name: called[name].append(done.result().offset))
    RecordFuture.set_results(condition, ours, [metadata(offset) for offset in range(5)])
    for offset, future in enumerate(theirs):
        future.set_result(metadata(offset))
    assert [f.result(timeout=0) for f in ours] == [f.result(timeout=0) for f in theirs]
    assert called["ours"] == called["theirs"] == [1]
    assert all(f.done() and not f.running() and f.exception() is None for f in ours)
    ours[2].add_done_callback(lambda done: called["ours"].append(done.result().offset))  # already done: runs now
    assert called["ours"] == [1, 2]
    with pytest.raises(concurrent.futures.InvalidStateError):
        RecordFuture.set_results(condition, ours[:1], [metadata(9)])


def test_waiters_in_other_threads_are_woken_by_the_batch() -> None:
    """`result`, `concurrent.futures.wait` and `as_completed` in other threads return once the batch is answered."""
    condition = threading.Condition()
    futures = [RecordFuture(condition) for _ in range(3)]
    answers: dict[str, object] = {}

    def wait_all() -> None:
        done, not_done = concurrent.futures.wait(futures, timeout=10)
        answers["wait"] = (len(done), len(not_done))

    def first_completed() -> None:
        answers["as_completed"] = next(concurrent.futures.as_completed(futures, timeout=10)).result().offset

    def result() -> None:
        answers["result"] = futures[2].result(timeout=10).offset

    threads = [threading.Thread(target=target) for target in (wait_all, first_completed, result)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    assert answers == {}
    RecordFuture.set_results(condition, futures, [metadata(offset) for offset in range(3)])
    for thread in threads:
        thread.join(10)
    assert answers["wait"] == (3, 0)
    assert answers["as_completed"] in {0, 1, 2}
    assert answers["result"] == 2


def test_a_failed_record_raises_its_error() -> None:
    future = RecordFuture(threading.Condition())
    error = RuntimeError("the batch failed")
    future.set_exception(error)
    assert future.exception(timeout=0) is error
    with pytest.raises(RuntimeError, match="the batch failed"):
        future.result(timeout=0)
