"""How the broker's pyiceberg catalog properties become Spark's catalog `raybroker` for Iceberg's Spark runtime
(`cluster.spark.iceberg_runtime.spark_catalog_configs`): the embedded SQLite catalog as Iceberg's JDBC catalog on the
same file, other catalogs by their own type and keys, never cached, and a SQL catalog on another database refused
with the reason; secrets are passed to Spark's conf, never into the error."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.iceberg.catalog import catalog_properties
from cluster.spark.iceberg_runtime import ICEBERG_CATALOG_CLASS, spark_catalog_configs
from storage.config.broker_config import BrokerConfig
from storage.errors import IcebergCatalogError

PREFIX = "spark.sql.catalog.raybroker"


def test_the_embedded_catalog_is_the_same_sqlite_file_through_jdbc(tmp_path: Path) -> None:
    properties = catalog_properties(BrokerConfig.from_properties({"log.dirs": str(tmp_path / "meta")}))
    configs = spark_catalog_configs(properties)
    assert configs == {
        PREFIX: ICEBERG_CATALOG_CLASS,
        f"{PREFIX}.type": "jdbc",
        f"{PREFIX}.uri": f"jdbc:sqlite:{tmp_path / 'meta-iceberg' / 'catalog.db'}",
        f"{PREFIX}.warehouse": (tmp_path / "meta-iceberg" / "warehouse").as_uri(),
        f"{PREFIX}.jdbc.init-catalog-tables": "false",
        f"{PREFIX}.cache-enabled": "false",
        f"{PREFIX}.io.manifest.cache-enabled": "true",
    }


def test_a_rest_catalog_keeps_its_type_uri_and_other_keys() -> None:
    properties = {"type": "rest", "uri": "http://catalog:8181", "credential": "id:secret", "warehouse": "s3://w"}
    assert spark_catalog_configs(properties) == {
        PREFIX: ICEBERG_CATALOG_CLASS,
        **{f"{PREFIX}.{key}": value for key, value in properties.items()},
        f"{PREFIX}.cache-enabled": "false",
        f"{PREFIX}.io.manifest.cache-enabled": "true",
    }


def test_a_sql_catalog_on_another_database_is_refused_without_its_password() -> None:
    properties = {"type": "sql", "uri": "postgresql+psycopg2://user:hunter2@db/iceberg"}
    with pytest.raises(IcebergCatalogError, match=r"SQLite only \(this one is on postgresql") as refused:
        spark_catalog_configs(properties)
    assert "hunter2" not in str(refused.value)
