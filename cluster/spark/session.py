"""A Spark session on the Ray cluster (RayDP), with measured settings.

`get_spark()` starts the session once per process (later calls return the same one) and `stop_spark()` stops it
(`raydp.stop_spark()`, then Ray itself if `get_spark` had to start an embedded Ray). The settings and why:

| setting                                            | value                      | why (measured)                  |
|----------------------------------------------------|----------------------------|---------------------------------|
| executors x cores                                  | 1 x 2                      | an executor is a JVM actor      |
| `spark.{driver,executor}.extraJavaOptions`,        | `--add-opens` for 14 JDK   | Ray's Java serialiser needs     |
| `spark.ray.raydp_app_master.extraJavaOptions`      | packages, all three JVMs   | reflection on JDK 17            |
| `spark.sql.shuffle.partitions`                     | executors x cores (2)      | 200 cost +1.2 s a shuffle       |
| `spark.sql.execution.arrow.pyspark.enabled`        | true                       | pandas paths 2-10x faster       |
| `spark.ui.enabled`, `spark.ui.showConsoleProgress` | false                      | no web UI, no progress bars     |
| `spark.log4j.config.file.name`                     | configs/log4j2-quiet...    | JVM logs at ERROR; Spark 3.5    |
|                                                    |                            | takes the file by path          |

Environment before Ray starts: `RAY_LOG_TO_DRIVER=0` (with log forwarding on, Spark's Python workers fed their
own output back until a worker log reached 213 MB in a minute), `RAY_BACKEND_LOG_LEVEL=error`, and
`PYSPARK_PYTHON`/`PYSPARK_DRIVER_PYTHON` set to this interpreter (workers must import this project).

The first Python job of a new session waits 5.4-6.3 s for Spark's Python workers to start; a warm-up job at
start-up (`cluster.spark.reading.warm_up_task`) pays that once, attaches every worker to Ray
(`cluster.spark.worker`), which the read tasks need, and imports the read path there.

Spark's own Kafka source (`spark.read.format("kafka")`, `spark.readStream.format("kafka")`) reads raybroker
over its Kafka listener (`kafka_bootstrap_servers()`) once the session has the connector:
`get_spark(kafka_connector=True)` asks Spark's Ivy for `spark-sql-kafka-0-10` of the installed pyspark's version
(`kafka_connector_configs`). Spark ships the resolved jars to RayDP's executors itself. Only the connector, its
token provider, kafka-clients and commons-pool2 are fetched (5.5 MB): its other dependencies are already among
Spark's jars at the same versions. The first start downloads them into the project's download cache
(`cluster.downloads.ivy_home`; Maven Central only, with time limits: `configs/ivysettings-maven-central.xml`);
later starts resolve from that cache, offline too. `get_spark(iceberg=True)` adds Iceberg's Spark runtime and SQLite's
JDBC driver (59 MB) the same way, for Spark's own reads of the topics' Iceberg tables (`cluster.spark.iceberg_runtime`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import ray

import storage.errors
from actors.calls import call, controller
from cluster.downloads import ivy_home
from cluster.runtime import ensure_ray, gcs_address
from cluster.spark.iceberg_runtime import ICEBERG_PACKAGES
from cluster.spark.reading import warm_up_task
from cluster.spark.segment_jar import segment_jar
from storage.errors import BrokerNotAvailableError, RaybrokerError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"
QUIET_LOG4J_PATH = CONFIGS_DIR / "log4j2-quiet.properties"
IVY_SETTINGS_PATH = CONFIGS_DIR / "ivysettings-maven-central.xml"
# Spark's Kafka connector; its version is pyspark's, and pyspark's wheels are built for Scala 2.12.
KAFKA_CONNECTOR_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.12"
# The connector's dependencies that Spark's own jars already hold, at the versions the connector asks for.
KAFKA_CONNECTOR_EXCLUDES = (
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "org.lz4:lz4-java",
    "org.xerial.snappy:snappy-java",
    "org.slf4j:slf4j-api",
    "commons-logging:commons-logging",
    "com.google.code.findbugs:jsr305",
)
APP_NAME = "raybroker"
NUM_EXECUTORS = 1
EXECUTOR_CORES = 2
EXECUTOR_MEMORY = "2G"
# JDK packages Ray's and Spark's Java code reach into reflectively (the list raydp's own examples pass).
JDK_OPENED_PACKAGES = (
    "java.lang",
    "java.lang.invoke",
    "java.io",
    "java.net",
    "java.nio",
    "java.math",
    "java.text",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)
JDK17_JAVA_OPTIONS = " ".join(
    ["-XX:+IgnoreUnrecognizedVMOptions"]
    + [f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in JDK_OPENED_PACKAGES]
)
QUIET_LOGGERS = ("ray", "ray.data", "raydp", "py4j")
# How a worker's traceback names one of raybroker's errors: `storage.errors.OffsetOutOfRangeError: message`.
_TYPED_ERROR_LINE = re.compile(r"^storage\.errors\.(\w+): (.*)$")

_session: SparkSession | None = None
_started_ray = False
# Whether the running session was started with the JVM segment reader's jar (`segment_reader_loaded`).
_segment_reader = False


def session_configs(
    executor_cores: int = EXECUTOR_CORES, num_executors: int = NUM_EXECUTORS, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The Spark configs of the table above; `extra` entries win."""
    configs = {
        "spark.sql.shuffle.partitions": str(executor_cores * num_executors),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log4j.config.file.name": str(QUIET_LOG4J_PATH),
        "spark.driver.extraJavaOptions": JDK17_JAVA_OPTIONS,
        "spark.executor.extraJavaOptions": JDK17_JAVA_OPTIONS,
        "spark.ray.raydp_app_master.extraJavaOptions": JDK17_JAVA_OPTIONS,
    }
    configs.update(extra or {})
    return configs


def kafka_connector_coordinate() -> str:
    """The Maven coordinate of Spark's Kafka connector for the installed pyspark."""
    from pyspark.version import __version__ as pyspark_version

    return f"{KAFKA_CONNECTOR_ARTIFACT}:{pyspark_version}"


def kafka_connector_configs() -> dict[str, str]:
    """The Spark configs that load Spark's Kafka connector (see the module docstring)."""
    return {
        "spark.jars.packages": kafka_connector_coordinate(),
        "spark.jars.excludes": ",".join(KAFKA_CONNECTOR_EXCLUDES),
        "spark.jars.ivySettings": str(IVY_SETTINGS_PATH),
        "spark.jars.ivy": str(ivy_home()),
    }


def package_configs(kafka_connector: bool, iceberg: bool) -> dict[str, str]:
    """The Spark configs that load the packages asked for from Maven Central through Ivy: Spark's Kafka connector
    (`kafka_connector_configs`), Iceberg's Spark runtime (`cluster.spark.iceberg_runtime.ICEBERG_PACKAGES`), both or
    neither."""
    configs = kafka_connector_configs() if kafka_connector or iceberg else {}
    packages = ([kafka_connector_coordinate()] if kafka_connector else []) + (list(ICEBERG_PACKAGES) if iceberg else [])
    if packages:
        configs["spark.jars.packages"] = ",".join(packages)
    return configs


def kafka_bootstrap_servers() -> str:
    """`host:port,...` of every running Kafka listener of the broker (as announced to the controller), for
    `kafka.bootstrap.servers`; `BrokerNotAvailableError` if no listener runs."""
    listeners = call(controller().listeners.remote())
    if not listeners:
        raise BrokerNotAvailableError("no Kafka listener runs: start one with `raybroker start` or KafkaListener()")
    return ",".join(
        f"{listener.host}:{listener.port}" for listener in sorted(listeners.values(), key=lambda item: item.broker_id)
    )


def _quiet_python() -> None:
    os.environ["RAY_LOG_TO_DRIVER"] = "0"
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    # pyspark 3.5 compares versions with distutils' LooseVersion on every Arrow call, and raydp reads
    # DataFrame.sql_ctx; both warn on every use.
    warnings.filterwarnings("ignore", message="distutils Version classes are deprecated", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message="DataFrame.sql_ctx is an internal property")


def get_spark(
    *,
    address: str | None = None,
    app_name: str = APP_NAME,
    num_executors: int = NUM_EXECUTORS,
    executor_cores: int = EXECUTOR_CORES,
    executor_memory: str = EXECUTOR_MEMORY,
    configs: Mapping[str, str] | None = None,
    warm_up: bool = True,
    kafka_connector: bool = False,
    iceberg: bool = False,
    segment_reader: bool = True,
) -> SparkSession:
    """The process's RayDP Spark session, started on first use (see the module docstring).

    Ray is attached first (`cluster.runtime.ensure_ray(address)`: an explicit address, `RAY_ADDRESS`, or an
    embedded Ray that `stop_spark` shuts down again). Later calls return the running session and ignore the
    sizing arguments. `kafka_connector` adds Spark's Kafka connector (`kafka_connector_configs`, which `configs`
    may override); if Ivy cannot resolve it, the start fails with a `RaybrokerError` (Ivy's own report is on
    stderr). `iceberg` adds Iceberg's Spark runtime the same way (`cluster.spark.iceberg_runtime`).
    `segment_reader` loads the JVM segment reader (`cluster.spark.segment_jar`, built on first use), with which
    `read_topics` decodes in the executors' JVM (`cluster.spark.segment_source`); without it, or when its jar cannot
    be had, reads decode in Spark's Python workers.
    """
    global _session, _started_ray, _segment_reader
    running = active_session()
    if running is not None:
        return running
    _quiet_python()
    _started_ray = ensure_ray(address) or _started_ray
    # RayDP: takes ~1.4 s to import, so only starting or stopping a session pays it (not the config helpers).
    import raydp
    from pyspark.errors import PySparkRuntimeError

    extra = package_configs(kafka_connector, iceberg)
    extra.update(configs or {})
    jar = segment_jar() if segment_reader else None
    if jar is not None:
        # On the JVMs' class paths, not in `spark.jars`: that list would replace the jars Spark resolves for
        # `spark.jars.packages` (the Kafka connector's), which the executors then lack. `raydp.executor.
        # extraClassPath` is RayDP's class path for the executor actors; the reader runs on one-node clusters only
        # (`cluster.spark.segment_source`), where the cached jar's path is the same for every JVM.
        for key in ("spark.driver.extraClassPath", "raydp.executor.extraClassPath"):
            extra[key] = ":".join(filter(None, (extra.get(key), str(jar))))
    try:
        spark = raydp.init_spark(
            app_name,
            num_executors=num_executors,
            executor_cores=executor_cores,
            executor_memory=executor_memory,
            configs=session_configs(executor_cores, num_executors, extra),
        )
    except PySparkRuntimeError as exc:
        # spark-submit exits before the JVM gateway starts when Ivy cannot resolve a package; pyspark only says
        # that the gateway exited.
        stop_spark()
        if "spark.jars.packages" in extra and exc.getErrorClass() == "JAVA_GATEWAY_EXITED":
            raise RaybrokerError(
                f"Spark did not start: Ivy could not resolve {extra['spark.jars.packages']} (neither cached under"
                f" {ivy_home()} nor downloadable from Maven Central); its report is on stderr"
            ) from exc
        raise
    spark.sparkContext.setLogLevel("ERROR")
    _session = spark
    _segment_reader = jar is not None
    if warm_up:
        warm_up_workers(spark, executor_cores * num_executors)
    return spark


def active_session() -> SparkSession | None:
    """The session `get_spark` started, if it is still running."""
    if _session is not None and _session.sparkContext._jsc is not None:
        return _session
    return None


def segment_reader_loaded(spark: SparkSession) -> bool:
    """Whether `spark` is the session `get_spark` started and it has the JVM segment reader's jar."""
    return _segment_reader and spark is active_session()


def stop_spark() -> None:
    """Stops the session (`raydp.stop_spark()`) and the embedded Ray `get_spark` started, if any. Idempotent."""
    global _session, _started_ray, _segment_reader
    # RayDP: takes ~1.4 s to import, so only starting or stopping a session pays it (not the config helpers).
    import raydp

    try:
        raydp.stop_spark()
    finally:
        _session = None
        _segment_reader = False
        if _started_ray:
            ray.shutdown()
            _started_ray = False


def warm_up_workers(spark: SparkSession, tasks: int) -> None:
    """Runs `tasks` tiny Python tasks at once, so that every Python worker slot starts and attaches to Ray now."""
    spark.range(0, tasks, 1, tasks).mapInArrow(partial(warm_up_task, gcs_address()), "id long").collect()


def typed_spark_error(exc: BaseException) -> RaybrokerError | None:
    """The raybroker error behind a failed Spark job, if one is: a read task's `OffsetOutOfRangeError` reaches the
    driver only as text inside Spark's `PythonException`; this rebuilds it (message only) from that text."""
    for line in reversed(str(exc).splitlines()):
        match = _TYPED_ERROR_LINE.match(line.strip())
        if match is None:
            continue
        error_type = getattr(storage.errors, match.group(1), None)
        if isinstance(error_type, type) and issubclass(error_type, RaybrokerError):
            return error_type(match.group(2))
    return None
