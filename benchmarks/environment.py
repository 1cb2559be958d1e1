"""The Ray and broker the actor and Spark benchmarks share: started once per run (Ray took ~5 s to start,
the broker ~3 s), stopped at the end of the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Broker settings for benchmarks: Kafka's defaults except the background intervals, which are long enough
# (5 min) that retention, flushes and checkpoints never run during a measurement.
BENCH_BROKER_PROPERTIES = {
    "log.retention.check.interval.ms": "300000",
    "log.flush.offset.checkpoint.interval.ms": "300000",
    "offsets.topic.num.partitions": "1",
}


class RayEnvironment:
    """Starts an embedded Ray (or reuses the one this process is connected to) and one broker under `log_dir`."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._owns_ray = False
        self._broker: Any = None
        self._properties: dict[str, str] | None = None
        self._restarts = 0

    def broker(self, properties: dict[str, str] | None = None) -> Any:
        """The running `actors.Broker`, started on first use with `BENCH_BROKER_PROPERTIES` plus `properties`.

        Asking for other properties than the running broker's (`log.partitions.per.process` for the
        many-partition benchmarks) stops it cleanly and starts one with them over a new log dir, so each
        configuration's topics stay apart.
        """
        wanted = {**BENCH_BROKER_PROPERTIES, **(properties or {})}
        if self._broker is not None and wanted == self._properties:
            return self._broker
        from actors.clients.broker import Broker, start_broker, stop_broker
        from cluster.runtime import ensure_ray

        if self._broker is None:
            self._owns_ray = ensure_ray() or self._owns_ray
        else:
            stop_broker()
            self._restarts += 1
        log_dir = self.log_dir / f"broker-{self._restarts}"
        log_dir.mkdir(parents=True, exist_ok=True)
        start_broker({**wanted, "log.dirs": str(log_dir)})
        self._broker = Broker.connect()
        self._properties = wanted
        return self._broker

    def close(self) -> None:
        """Stops Spark (if a benchmark started it), the broker, and Ray if this run started it."""
        if self._broker is None:
            return
        import ray

        from actors.clients.broker import stop_broker
        from cluster.spark.session import stop_spark

        stop_spark()
        stop_broker()
        self._broker = None
        if self._owns_ray:
            ray.shutdown()
