"""The Ray and broker the actor and Spark benchmarks share: started once per run (Ray takes ~5 s to start on
2 cores, the broker ~3 s), stopped at the end of the run."""

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
    """Starts an embedded Ray (or reuses the one this process is connected to) and one broker over `log_dir`."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._owns_ray = False
        self._broker: Any = None

    def broker(self) -> Any:
        """The running `actors.Broker`, started on first use."""
        if self._broker is None:
            from actors.broker import Broker, start_broker
            from cluster.ray_runtime import ensure_ray

            self._owns_ray = ensure_ray()
            self.log_dir.mkdir(parents=True, exist_ok=True)
            start_broker({**BENCH_BROKER_PROPERTIES, "log.dirs": str(self.log_dir)})
            self._broker = Broker.connect()
        return self._broker

    def close(self) -> None:
        """Stops Spark (if a benchmark started it), the broker, and Ray if this run started it."""
        if self._broker is None:
            return
        import ray

        from actors.broker import stop_broker
        from cluster.spark_session import stop_spark

        stop_spark()
        stop_broker()
        self._broker = None
        if self._owns_ray:
            ray.shutdown()
