"""The cluster's Iceberg translation driver as a Ray actor: one `TranslationDriver` whose passes run on a thread of
the actor, named `iceberg-driver` and built with `actors.options.iceberg_driver_options`.

Where it runs, and why: on the controller's node, as the embedded catalog (SQLite and a file warehouse beside the
metadata dir) lives there; with a configured catalog any node would do, and the controller's is as good as any.
It is `cluster` code (pyiceberg, the read planner), which `actors` may not import, so, like the Kafka listeners,
it is started here by `start_iceberg_driver`, which `raybroker start` calls after
`actors.clients.broker.start_broker`, and `stop_broker` stops it first by its name alone. It is started always,
idle while no topic sets `iceberg.mode`: a topic altered to a mode later is translated without a restart, and an
idle pass costs one controller call every `POLL_INTERVAL_S`. An embedded broker (tests, notebooks) starts it by
calling `start_iceberg_driver` after `start_broker`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import ray

from actors.calls import call, controller, get_actor
from actors.clients.broker import Broker
from actors.metrics.ray_export import exported_metrics
from actors.options import ICEBERG_DRIVER_NAME, iceberg_driver_options
from cluster.iceberg.catalog import catalog_properties
from cluster.iceberg.translation_driver import POLL_INTERVAL_S, TopicStatus, TranslationDriver
from storage.config.broker_config import BrokerConfig
from storage.errors import BrokerNotAvailableError

logger = logging.getLogger(__name__)
# A stop waits this long for the round in progress to end before the actor is killed anyway (the round's files
# are then orphans, the table's offsets untouched: nothing is lost or repeated).
STOP_TIMEOUT_S = 30.0


class IcebergDriverActor:
    """Runs `TranslationDriver.run_pass` every `poll_interval_s`, or sooner when a topic's round is due, until
    `stop` (see the module docstring)."""

    def __init__(self, properties: dict[str, str], poll_interval_s: float = POLL_INTERVAL_S) -> None:
        config = BrokerConfig.from_properties(properties)
        self._catalog_properties = catalog_properties(config)
        self._driver = TranslationDriver(self._catalog_properties, Broker.connect(), metrics=exported_metrics())
        self._poll_interval_s = poll_interval_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="iceberg-driver", daemon=True)
        self._thread.start()

    def ready(self) -> bool:
        return True

    def status(self, topic: str | None = None) -> list[TopicStatus]:
        return self._driver.status(topic)

    def catalog_properties(self) -> dict[str, str]:
        """The properties the tables' catalog is loaded with, for the cluster's own readers of the tables
        (`cluster.data.table_history`); they may hold the catalog's credentials, which stay inside the Ray cluster."""
        return dict(self._catalog_properties)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(STOP_TIMEOUT_S)
        self._driver.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._driver.run_pass()
            except Exception:  # The controller between leaders: the loop goes on, the next pass asks again.
                logger.exception("Iceberg translation pass failed")
            self._stopping.wait(min(self._poll_interval_s, self._driver.seconds_until_due()))


_IcebergDriver = ray.remote(IcebergDriverActor)


def start_iceberg_driver(config: BrokerConfig, poll_interval_s: float = POLL_INTERVAL_S) -> Any:
    """The cluster's translation driver, started on the controller's node when this is that node (its
    `log.dirs[0]` is the metadata dir, beside which the embedded catalog lives), else the running one or None."""
    node_id = ray.get_runtime_context().get_node_id()
    if call(controller().metadata_quorum.remote())["node"] != node_id:
        with contextlib.suppress(BrokerNotAvailableError):
            return get_actor(ICEBERG_DRIVER_NAME)
        return None
    driver: Any = _IcebergDriver.options(**iceberg_driver_options(node_id)).remote(
        config.to_properties(), poll_interval_s
    )
    call(driver.ready.remote())
    return driver


def iceberg_catalog_properties() -> dict[str, str]:
    """The running driver's catalog properties; `BrokerNotAvailableError` when no driver runs."""
    return dict(call(get_actor(ICEBERG_DRIVER_NAME).catalog_properties.remote()))


def iceberg_driver_status(topic: str | None = None) -> list[TopicStatus]:
    """The running driver's status of every translated topic (or `topic`'s); `BrokerNotAvailableError` when no
    driver runs."""
    return list(call(get_actor(ICEBERG_DRIVER_NAME).status.remote(topic)))
