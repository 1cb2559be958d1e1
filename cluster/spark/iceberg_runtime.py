"""Spark's own Iceberg reader over the topics' tables: the Iceberg Spark runtime and the broker's catalog in Spark.

`get_spark(iceberg=True)` adds `ICEBERG_PACKAGES` to the session (Iceberg's Spark runtime for pyspark 3.5 and Scala
2.12, and SQLite's JDBC driver for the embedded catalog), fetched by Spark's Ivy into the download cache as the Kafka
connector is. `register_iceberg_catalog(spark)` then names the catalog the broker translates into (the translation
driver's `iceberg.catalog.*` properties, `cluster.iceberg.catalog`) as Spark's catalog `raybroker`, so that
`spark.table(topic_table_name(topic))` (`raybroker.raybroker.<topic>` by default) reads a topic's table with
Iceberg's own reader: time travel, metadata tables (`.snapshots`, `.files`) and SQL included.

How pyiceberg's properties become the Iceberg runtime's (`spark_catalog_configs`):

| pyiceberg                        | Spark's `spark.sql.catalog.raybroker.*`                                          |
|----------------------------------|----------------------------------------------------------------------------------|
| `type=sql`, `uri=sqlite:///path` | `type=jdbc`, `uri=jdbc:sqlite:path`, `jdbc.init-catalog-tables=false`             |
| `type=sql`, another database     | refused (`IcebergCatalogError`): Spark then needs that database's JDBC driver     |
| any other `type`                 | the same `type` and `uri` (`rest`, `hive`, `glue`, ...)                           |
| every other property             | the same key (`warehouse`, `credential`, `s3.endpoint`, ...)                      |

and always `cache-enabled=false`: each query loads the table's current snapshot, where Iceberg's default cache would
answer from a snapshot up to 30 s old while the translation driver commits; and `io.manifest.cache-enabled=true`:
manifests, which never change once written, are read once per session rather than at every query's planning. The
Spark catalog's name must be pyiceberg's (`CATALOG_NAME`): a JDBC catalog keeps each table's row under its catalog's
name.

`jdbc.init-catalog-tables=false`, measured: the runtime's check that the catalog's tables exist (pyiceberg made
them) leaves a read transaction open on its pooled SQLite connection, after which the broker's commits wait on
"database is locked" and the session keeps reading the catalog as it was when it first looked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from actors.calls import call
from actors.clients.broker import Broker
from cluster.iceberg.catalog import CATALOG_NAME
from cluster.iceberg.translation_driver_actor import iceberg_catalog_properties
from storage.config.iceberg_topic_config import table_identifier
from storage.config.log_config import LogConfig
from storage.errors import IcebergCatalogError, RaybrokerError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ICEBERG_VERSION = "1.10.1"
ICEBERG_PACKAGES = (
    f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{ICEBERG_VERSION}",
    "org.xerial:sqlite-jdbc:3.50.3.0",
)
ICEBERG_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
SQLITE_PREFIX = "sqlite:///"
CONF_PREFIX = f"spark.sql.catalog.{CATALOG_NAME}"


def spark_catalog_configs(properties: Mapping[str, str]) -> dict[str, str]:
    """The Spark configs naming the catalog of pyiceberg's `properties` as Spark's catalog `raybroker` (see the
    module docstring); `IcebergCatalogError` for a SQL catalog on a database other than SQLite."""
    runtime = dict(properties)
    if properties.get("type") == "sql":
        uri = properties.get("uri", "")
        if not uri.startswith(SQLITE_PREFIX):
            scheme = uri.split(":", 1)[0] or "no uri"
            raise IcebergCatalogError(
                f"Spark's Iceberg runtime reads raybroker's SQL catalog on SQLite only (this one is on {scheme}):"
                f" set the {CONF_PREFIX}.* configs for its JDBC driver yourself"
            )
        runtime.update(
            {
                "type": "jdbc",
                "uri": "jdbc:sqlite:" + uri.removeprefix(SQLITE_PREFIX),
                "jdbc.init-catalog-tables": "false",
            }
        )
    runtime["cache-enabled"] = "false"
    runtime["io.manifest.cache-enabled"] = "true"
    return {CONF_PREFIX: ICEBERG_CATALOG_CLASS} | {f"{CONF_PREFIX}.{key}": value for key, value in runtime.items()}


def register_iceberg_catalog(spark: SparkSession, properties: Mapping[str, str] | None = None) -> str:
    """Names the broker's Iceberg catalog (`properties`, by default the running translation driver's) as the
    session's catalog `raybroker` and returns that name. `RaybrokerError` when the session lacks the Iceberg runtime
    (start it with `get_spark(iceberg=True)`); `BrokerNotAvailableError` when no properties are given and no driver
    runs. Naming another catalog than the session's `raybroker` (another broker's) replaces it: Spark forgets the
    catalogs it loaded (and the current catalog and namespace, back to Spark's own)."""
    if not _has_runtime(spark):
        raise RaybrokerError("this Spark session has no Iceberg runtime: start it with get_spark(iceberg=True)")
    configs = spark_catalog_configs(properties or iceberg_catalog_properties())
    named = {row["key"]: row["value"] for row in spark.sql("SET").collect() if _names_catalog(row["key"])}
    if named != configs:
        for key in named.keys() - configs.keys():
            spark.conf.unset(key)
        for key, value in configs.items():
            spark.conf.set(key, value)
        # Spark keeps a catalog it loaded for the session's life, whatever its configs become later.
        spark._jsparkSession.sessionState().catalogManager().reset()
    return CATALOG_NAME


def topic_table_name(topic: str) -> str:
    """Spark's name of the topic's table in the catalog `register_iceberg_catalog` names: `raybroker.` and the
    topic's `iceberg.table` (`raybroker.<topic>` by default), each part quoted (topic names may hold `-` and `.`)."""
    configs: dict[str, dict[str, str]] = call(Broker.connect().controller.topic_configs.remote())
    if topic not in configs:
        raise UnknownTopicOrPartitionError(f"no topic {topic!r}")
    return spark_table_name(table_identifier(LogConfig.from_properties(configs[topic]).iceberg_table, topic))


def spark_table_name(identifier: tuple[str, ...]) -> str:
    """Spark's name of the table `identifier` (namespace and table) in the catalog `register_iceberg_catalog`
    names, each part quoted."""
    return ".".join(f"`{part.replace('`', '``')}`" for part in (CATALOG_NAME, *identifier))


def _names_catalog(key: str) -> bool:
    """Whether a Spark config is one of catalog `raybroker`'s."""
    return key == CONF_PREFIX or key.startswith(f"{CONF_PREFIX}.")


def _has_runtime(spark: SparkSession) -> bool:
    """Whether the session's JVM loads Iceberg's Spark catalog class."""
    try:
        jvm: Any = spark.sparkContext._jvm
        jvm.java.lang.Class.forName(
            ICEBERG_CATALOG_CLASS, False, jvm.java.lang.Thread.currentThread().getContextClassLoader()
        )
    except Exception:  # py4j's Py4JJavaError wrapping ClassNotFoundException.
        return False
    return True
