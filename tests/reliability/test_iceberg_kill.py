"""kill -9 through Iceberg translation: a transactional producer writes to a `key_value` topic (one transaction in
three aborted) while the translation driver commits a round every 200 ms, and the harness SIGKILLs, at random
moments, in turn, the driver's process (the committer, at any point of a round: planning, its Parquet tasks, its
Iceberg commit; Ray restarts it, `max_restarts=-1`), the partition host holding the topic's partitions (restarted
too), and a Ray worker while it runs a round's Parquet-writing task (a translator; Ray retries the task, or the round
fails and is run again).

Once the producer stopped and the table caught up with the log's last stable offsets: the table holds exactly what a
read_committed consumer reads from the log, each record once by (partition, offset) with its value; every record of a
transaction whose commit returned is in it, none of a transaction whose abort returned. Quick mode: 4 kills (one of
a translator); long mode: 20.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from actors.calls import get_actor
from actors.clients.admin import Admin
from actors.clients.broker import Broker
from actors.clients.producer import Producer
from actors.options import ICEBERG_DRIVER_NAME
from storage.config.broker_config import BrokerConfig
from tests.cluster.iceberg.driver_support import start_broker_with_driver
from tests.reliability.broker_support import seeded_random, sigkill_and_wait
from tests.reliability.iceberg_checks import Row, read_committed, table_rows, wait_for_table
from tests.reliability.modes import scaled

pytestmark = [pytest.mark.reliability, pytest.mark.ray]

KILLS = scaled(4, 20)
PARTITIONS = 3
TOPIC = "iceberg-kill9"
RECORDS_PER_TRANSACTION = 20
# The producer's pace: a transaction every this many seconds, so the table has a few thousand rows to check.
TRANSACTION_EVERY_S = 0.05
# The Ray task writing a partition's Parquet files in a round, and how long a kill waits to catch one running.
TRANSLATION_TASK = "_write_data_files"
TRANSLATOR_WAIT_S = 20.0
CATCH_UP_S = 120.0


def _identity(data: bytes) -> bytes:
    return data


@pytest.fixture(scope="module")
def config(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> Iterator[BrokerConfig]:
    yield start_broker_with_driver(start_test_broker, poll_interval_s=0.1)


class TransactionalWriter:
    """Writes transactions until stopped, one in three aborted; what each transaction's commit or abort returned.
    A transaction that failed (a partition actor restarting) is aborted, or its producer replaced (fencing the old
    one): its records are in neither list, and the oracle is the log's read_committed read."""

    def __init__(self) -> None:
        self.committed: list[Row] = []
        self.aborted: list[Row] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="iceberg-kill-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the writer did not stop"

    def _run(self) -> None:
        producer = self._producer()
        number = 0
        while not self._stop.is_set():
            number += 1
            try:
                producer.begin_transaction()
                futures = [
                    (producer.send(TOPIC, value=b"t%d-%d" % (number, index)), b"t%d-%d" % (number, index))
                    for index in range(RECORDS_PER_TRANSACTION)
                ]
                producer.flush()
                rows = [(f.result().partition, f.result().offset, None, value) for f, value in futures]
                if number % 3 == 0:
                    producer.abort_transaction()
                    self.aborted.extend(rows)
                else:
                    producer.commit_transaction()
                    self.committed.extend(rows)
            except Exception:
                self.failures += 1
                producer.close()
                producer = self._producer()
            time.sleep(TRANSACTION_EVERY_S)
        producer.close()

    @staticmethod
    def _producer() -> Producer:
        producer = Producer(transactional_id="iceberg-kill9", value_serializer=_identity, linger_ms=1)
        producer.init_transactions()
        return producer


def _sigkill_a_translator() -> int:
    """SIGKILLs a Ray worker of this test's Ray (a process this one started) while it runs a translation task (its
    process title is then `ray::<task>`), caught within `TRANSLATOR_WAIT_S`; 1 if one was killed."""
    title = f"ray::{TRANSLATION_TASK}"
    deadline = time.monotonic() + TRANSLATOR_WAIT_S
    while time.monotonic() < deadline:
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                args = process.cmdline()
                if args and args[0].split(" ")[0] == title:
                    process.send_signal(signal.SIGKILL)
                    return 1
        time.sleep(0.002)
    return 0


def test_sigkills_of_driver_partition_host_and_translators_lose_and_repeat_nothing(config: BrokerConfig) -> None:
    """Slow (~60 s): each kill waits for Ray to restart the process killed."""
    rng, _ = seeded_random("iceberg kill -9")
    Admin().create_topic(TOPIC, PARTITIONS, config={"iceberg.mode": "key_value", "iceberg.target.lag.ms": "200"})
    writer = TransactionalWriter()
    translators_killed = 0
    try:
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.3, 1.5))
            if kill % 3 == 0:
                sigkill_and_wait(get_actor(ICEBERG_DRIVER_NAME), rng.uniform(0.0, 0.3), ready="ready")
            elif kill % 3 == 1:
                # The partition host holding the partition (it holds every partition of the node's topics).
                host = Broker.connect().partition(TOPIC, rng.randrange(PARTITIONS)).host
                sigkill_and_wait(host, rng.uniform(0.0, 0.3), "ping")
            else:
                translators_killed += _sigkill_a_translator()
    finally:
        writer.stop()
    assert writer.committed, f"no transaction committed ({writer.failures} failed)"
    assert translators_killed == KILLS // 3, f"{translators_killed} translation tasks caught running"
    expected, ends = read_committed(TOPIC, PARTITIONS, CATCH_UP_S)
    wait_for_table(TOPIC, ends, CATCH_UP_S)
    rows = table_rows(config, TOPIC)
    assert len({(p, o) for p, o, _, _ in rows}) == len(rows), "a record is in the table twice"
    assert rows == expected
    assert set(writer.committed) <= set(rows)
    assert not set(writer.aborted) & set(rows)
    print(
        f"{KILLS} kills: {len(rows)} rows, {len(writer.committed)} committed and {len(writer.aborted)} aborted by "
        f"the writer, {writer.failures} transactions failed"
    )
