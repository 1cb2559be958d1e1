"""`RecordFuture`, the future `Producer.send` returns, behaves as the `concurrent.futures.Future` it is (the oracle
is the standard library's own `Future`, driven the same way), though the futures of a batch share one outcome,
are answered together, and make their `RecordMetadata` only when asked. No Ray: the futures are driven directly."""

from __future__ import annotations

import concurrent.futures
import threading
import time
import weakref

import pytest

from actors.clients.futures import BatchOutcome, RecordFuture, RecordMetadata

TIMESTAMPS = [1_000 + index for index in range(5)]
FIRST_OFFSET = 40


def batch(count: int = 5) -> tuple[BatchOutcome, list[RecordFuture]]:
    outcome = BatchOutcome("t", 3, TIMESTAMPS[:count])
    return outcome, [RecordFuture(outcome, index) for index in range(count)]


def metadata(index: int, log_append_time: int | None = None) -> RecordMetadata:
    timestamp = TIMESTAMPS[index] if log_append_time is None else log_append_time
    return RecordMetadata("t", 3, FIRST_OFFSET + index, timestamp)


def test_a_batch_answered_together_behaves_like_futures_answered_one_by_one() -> None:
    outcome, ours = batch()
    theirs: list[concurrent.futures.Future[RecordMetadata]] = [concurrent.futures.Future() for _ in range(5)]
    for future in theirs:
        future.set_running_or_notify_cancel()
    called: dict[str, list[int]] = {"ours": [], "theirs": []}
    for name, futures in (("ours", ours), ("theirs", theirs)):
        for future in futures:
            assert not future.done() and future.running() and not future.cancel()
        futures[1].add_done_callback(lambda done, name=name: called[name].append(done.result().offset))
    assert outcome.watched == [ours[1]]
    outcome.succeed(FIRST_OFFSET, -1)
    for index, future in enumerate(theirs):
        future.set_result(metadata(index))
    assert [f.result(timeout=0) for f in ours] == [f.result(timeout=0) for f in theirs]
    assert called["ours"] == called["theirs"] == [FIRST_OFFSET + 1]
    assert all(f.done() and not f.running() and f.exception() is None for f in ours)
    ours[2].add_done_callback(lambda done: called["ours"].append(done.result().offset))  # already done: runs now
    assert called["ours"] == [FIRST_OFFSET + 1, FIRST_OFFSET + 2]
    with pytest.raises(concurrent.futures.InvalidStateError):
        outcome.succeed(FIRST_OFFSET, -1)


def test_log_append_time_replaces_every_record_timestamp() -> None:
    outcome, futures = batch(3)
    outcome.succeed(FIRST_OFFSET, 77)
    assert [future.result(timeout=0) for future in futures] == [metadata(index, 77) for index in range(3)]


def test_waiters_in_other_threads_are_woken_by_the_batch() -> None:
    """`result`, `concurrent.futures.wait` and `as_completed` in other threads return once the batch is answered."""
    outcome, futures = batch(3)
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
    outcome.succeed(FIRST_OFFSET, -1)
    for thread in threads:
        thread.join(10)
    assert answers["wait"] == (3, 0)
    assert answers["as_completed"] in {FIRST_OFFSET, FIRST_OFFSET + 1, FIRST_OFFSET + 2}
    assert answers["result"] == FIRST_OFFSET + 2


def test_a_failed_record_raises_its_error_and_callbacks_see_it() -> None:
    _, futures = batch(2)
    seen: list[BaseException | None] = []
    futures[0].add_done_callback(lambda done: seen.append(done.exception()))
    error = RuntimeError("the batch failed")
    for future in futures:
        future.set_exception(error)
    assert seen == [error]
    assert futures[1].exception(timeout=0) is error
    with pytest.raises(RuntimeError, match="the batch failed"):
        futures[0].result(timeout=0)


def test_a_failed_batch_fails_every_future_as_set_exception_does() -> None:
    """`BatchOutcome.fail` against the standard library's `Future.set_exception` on futures driven the same way:
    callbacks, `wait` in another thread, `result` and `exception`."""
    outcome, ours = batch(3)
    theirs: list[concurrent.futures.Future[RecordMetadata]] = [concurrent.futures.Future() for _ in range(3)]
    for future in theirs:
        future.set_running_or_notify_cancel()
    error = RuntimeError("the batch failed")
    seen: dict[str, list[BaseException | None]] = {"ours": [], "theirs": []}
    waited: dict[str, tuple[int, int]] = {}

    def wait_all(name: str, futures: list[concurrent.futures.Future[RecordMetadata]]) -> None:
        done, not_done = concurrent.futures.wait(futures, timeout=10, return_when=concurrent.futures.FIRST_EXCEPTION)
        waited[name] = (len(done), len(not_done))

    threads = []
    for name, futures in (("ours", ours), ("theirs", theirs)):
        futures[0].add_done_callback(lambda done, name=name: seen[name].append(done.exception()))
        threads.append(threading.Thread(target=wait_all, args=(name, futures)))
        threads[-1].start()
    time.sleep(0.05)
    assert waited == {}
    outcome.fail(error)
    for future in theirs:
        future.set_exception(error)
    for thread in threads:
        thread.join(10)
    assert waited["ours"] == waited["theirs"] == (3, 0)
    assert seen["ours"] == seen["theirs"] == [error]
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.done() and other.done() and not mine.running()
        assert mine.exception(timeout=0) is other.exception(timeout=0) is error
        with pytest.raises(RuntimeError, match="the batch failed"):
            mine.result(timeout=0)
    with pytest.raises(concurrent.futures.InvalidStateError):
        outcome.succeed(FIRST_OFFSET, -1)


def test_a_future_set_on_its_own_keeps_its_outcome_when_the_batch_is_answered() -> None:
    outcome, futures = batch(2)
    calls: list[int] = []
    futures[0].add_done_callback(lambda done: calls.append(0))
    futures[0].set_result(metadata(4))
    assert calls == [0]
    outcome.fail(RuntimeError("the batch failed"))
    assert calls == [0]
    assert futures[0].result(timeout=0) == metadata(4) and futures[0].exception(timeout=0) is None
    assert isinstance(futures[1].exception(timeout=0), RuntimeError)


def test_the_batch_does_not_keep_the_futures_its_callers_dropped() -> None:
    """A future nobody holds is freed at once (the garbage collector never walks it); one with a callback stays
    until the batch is answered, and gets it."""
    from actors.clients.producer_batch import ProducerBatch
    from storage.records.compression import CompressionType

    producer_batch = ProducerBatch("t", 3, 0, CompressionType.NONE)
    dropped = weakref.ref(producer_batch.append(b"k", b"v", 1_000, (), 20))
    assert dropped() is None
    answered: list[int] = []
    kept = producer_batch.append(b"k", b"v", 1_001, (), 20)
    kept.add_done_callback(lambda done: answered.append(done.result().offset))
    del kept
    producer_batch.complete(FIRST_OFFSET, -1)
    assert answered == [FIRST_OFFSET + 1]
