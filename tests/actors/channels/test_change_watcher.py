"""`ChangeWatcher` against `ChangeNotices` over real datagram sockets, without Ray: a waiter wakes on a notice of its
partition (also one sent between its look and its wait), times out without one, and ignores notices of partitions it
does not follow and datagrams that name none; the sender forgets a watcher that is gone and never blocks on one that
does not read."""

from __future__ import annotations

import asyncio
import socket
import time

from actors.channels.change_notices import MAX_WATCHERS_PER_PARTITION, ChangeNotices
from actors.channels.change_watcher import ChangeWatcher


def test_a_waiter_wakes_on_its_partitions_notice_and_times_out_without_one() -> None:
    async def scenario() -> None:
        watcher = ChangeWatcher(asyncio.get_running_loop())
        notices = ChangeNotices()
        try:
            watcher.follow("t", 0)
            notices.watch("t", 0, watcher.address)
            seen = watcher.count("t", 0)
            started = time.monotonic()
            assert not await watcher.changed("t", 0, seen, 0.05)
            assert time.monotonic() - started >= 0.05
            asyncio.get_running_loop().call_later(0.01, notices.notify, "t", 0)
            assert await watcher.changed("t", 0, seen, 5.0)
            assert time.monotonic() - started < 2.0
            assert watcher.count("t", 0) == seen + 1
        finally:
            watcher.close()

    asyncio.run(scenario())


def test_a_notice_between_the_look_and_the_wait_is_not_slept_through() -> None:
    async def scenario() -> None:
        watcher = ChangeWatcher(asyncio.get_running_loop())
        notices = ChangeNotices()
        try:
            watcher.follow("t", 3)
            notices.watch("t", 3, watcher.address)
            seen = watcher.count("t", 3)
            notices.notify("t", 3)  # after the look, before the wait
            await asyncio.sleep(0.01)  # the loop reads the notice
            started = time.monotonic()
            assert await watcher.changed("t", 3, seen, 5.0)
            assert time.monotonic() - started < 1.0
        finally:
            watcher.close()

    asyncio.run(scenario())


def test_notices_of_partitions_not_followed_and_forged_datagrams_are_ignored() -> None:
    async def scenario() -> None:
        watcher = ChangeWatcher(asyncio.get_running_loop())
        notices = ChangeNotices()
        forger = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            watcher.follow("t", 0)
            notices.watch("other", 0, watcher.address)
            notices.notify("other", 0)
            for forged in (b"\xff\xfe", b"no partition here", b"t-x", b"../t-0-delete"):
                forger.sendto(forged, watcher.address)
            assert not await watcher.changed("t", 0, 0, 0.05)
            assert (watcher.count("t", 0), watcher.count("other", 0), watcher.following("other", 0)) == (0, 0, False)
            forger.sendto(b"t-0", watcher.address)  # a forged notice of a followed partition: one look, no harm
            assert await watcher.changed("t", 0, 0, 5.0)
        finally:
            forger.close()
            watcher.close()

    asyncio.run(scenario())


def test_an_unfollowed_partitions_waiters_wake_and_its_notices_stop_counting() -> None:
    async def scenario() -> None:
        watcher = ChangeWatcher(asyncio.get_running_loop())
        try:
            watcher.follow("t", 0)
            waiting = asyncio.ensure_future(watcher.changed("t", 0, 0, 5.0))
            await asyncio.sleep(0.01)
            watcher.unfollow("t", 0)
            assert await asyncio.wait_for(waiting, 1.0)
            assert not watcher.following("t", 0)
        finally:
            watcher.close()

    asyncio.run(scenario())


def test_a_watcher_gone_is_forgotten_and_one_that_does_not_read_never_blocks_the_sender() -> None:
    async def scenario() -> None:
        notices = ChangeNotices()
        idle = ChangeWatcher(asyncio.get_running_loop())
        gone = ChangeWatcher(asyncio.get_running_loop())
        try:
            notices.watch("t", 0, idle.address)
            notices.watch("t", 0, gone.address)
            gone.close()
            started = time.monotonic()
            for _ in range(20_000):  # far more than the idle watcher's buffer holds, never read meanwhile
                notices.notify("t", 0)
            assert time.monotonic() - started < 20.0
            notices.notify("t", 0)
            assert notices.watchers("t", 0) == (idle.address,)
        finally:
            idle.close()

    asyncio.run(scenario())


def test_watchers_per_partition_are_bounded_and_forgotten_when_the_log_closes() -> None:
    notices = ChangeNotices()
    for index in range(MAX_WATCHERS_PER_PARTITION + 5):
        notices.watch("t", 0, f"\0raybroker-changes-test-{index}")
    assert len(notices.watchers("t", 0)) == MAX_WATCHERS_PER_PARTITION
    notices.forget("t", 0)
    assert notices.watchers("t", 0) == ()
