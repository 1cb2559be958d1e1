"""The page-view events of `raybroker demo` and the producer thread that writes them while Spark reads.

An event is a msgpack map `{user, page, latency_ms}` keyed by its user (so each user's events stay in order on one
partition). `PageViewProducer` sends them at a steady rate from a thread through the idempotent `Producer`, each
with an explicit timestamp (the send time, `CreateTime`), and keeps those timestamps: they are the event times a
streaming query windows by, so the demo can count per window what was produced and compare.
"""

from __future__ import annotations

import random
import threading
import time

from actors.clients.producer import Producer
from actors.clients.serializers import msgpack_serializer

PAGES = ("/", "/search", "/cart", "/checkout", "/help")
PAGE_VIEW_SCHEMA = "user string, page string, latency_ms long"
USERS = 50
# The producer thread wakes this often and sends what is due since its start: at 2,000 events/s, 100 a wake-up.
PRODUCER_SEND_SLICE_S = 0.05


class PageViewProducer:
    """Sends page views at about `rate` events a second until stopped; keeps each event's timestamp."""

    def __init__(self, topic: str, rate: int, seed: int = 7) -> None:
        self._topic = topic
        self._rate = rate
        self._random = random.Random(seed)
        self._producer = Producer(value_serializer=msgpack_serializer)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-page-views", daemon=True)
        self.timestamps_ms: list[int] = []

    @property
    def sent(self) -> int:
        return len(self.timestamps_ms)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self._rate)
            while self.sent < due:
                user = f"user-{self._random.randrange(USERS)}"
                event = {"user": user, "page": self._random.choice(PAGES), "latency_ms": self._random.randrange(5, 400)}
                timestamp_ms = time.time_ns() // 1_000_000
                self._producer.send(self._topic, event, key=user, timestamp_ms=timestamp_ms)
                self.timestamps_ms.append(timestamp_ms)
            self._stop.wait(PRODUCER_SEND_SLICE_S)

    def stop(self) -> int:
        """Stops sending, waits until every event is written; returns how many were sent."""
        self._stop.set()
        self._thread.join()
        self._producer.close()
        return self.sent
