"""The Iceberg catalog of a broker's topic tables: its properties from the broker config, and the catalog loaded.

Every broker key `iceberg.catalog.<key>` is handed as `<key>` to pyiceberg's `load_catalog("raybroker", ...)`, so any
catalog pyiceberg knows works (`type=rest` and `uri`, `type=sql` and a database `uri`, `type=glue`, ...) and any
reader that loads the same properties sees the same tables. With none set, the catalog is embedded and needs nothing
else: pyiceberg's SQL catalog on a SQLite file and a file warehouse, both in `<metadata dir>-iceberg/` beside the
metadata dir (the first of `log.dirs`, as the controller's), not inside it, where the log manager would take the
folders for partitions. That default lives on the metadata dir's node, so the translators run there.

Loading fails with `IcebergCatalogError` (a catalog that cannot be reached, a property it refuses): the caller
pauses and tries again, as the translation driver does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pyiceberg.catalog import Catalog, load_catalog

from storage.config.broker_config import BrokerConfig
from storage.errors import IcebergCatalogError

CATALOG_NAME = "raybroker"
# The embedded catalog's folder is the metadata dir's name with this suffix, beside it.
EMBEDDED_SUFFIX = "-iceberg"


def catalog_properties(config: BrokerConfig) -> dict[str, str]:
    """The properties `load_catalog` gets: the broker's `iceberg.catalog.*` keys, or the embedded default."""
    if config.iceberg_catalog:
        return dict(config.iceberg_catalog)
    metadata_dir = Path(config.log_dirs[0]).absolute()
    home = metadata_dir.with_name(metadata_dir.name + EMBEDDED_SUFFIX)
    return {
        "type": "sql",
        "uri": f"sqlite:///{home / 'catalog.db'}",
        "warehouse": (home / "warehouse").as_uri(),
    }


def open_catalog(properties: Mapping[str, str]) -> Catalog:
    """The catalog the properties name; an embedded SQLite catalog's folders are made first.

    Raises `IcebergCatalogError` when it cannot be loaded (pyiceberg's and the driver's errors, wrapped)."""
    uri = properties.get("uri", "")
    try:
        if properties.get("type") == "sql" and uri.startswith("sqlite:///"):
            Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        return load_catalog(CATALOG_NAME, **properties)
    except Exception as exc:  # pyiceberg's ValueError, NotImplementedError, SQLAlchemy's, HTTP errors; mkdir's OSError.
        raise IcebergCatalogError(f"cannot load the Iceberg catalog ({_described(properties)}): {exc}") from exc


def _described(properties: Mapping[str, str]) -> str:
    """The catalog's type and uri, for errors: never its other properties, which may hold credentials."""
    return f"type={properties.get('type', '?')}, uri={properties.get('uri', '?')}"
