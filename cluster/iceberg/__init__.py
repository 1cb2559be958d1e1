"""Topics kept as Iceberg tables (issue 48): the catalog a broker's `iceberg.catalog.*` keys name, the table of a
topic in `key_value` mode, and the translation of its committed records into that table, exactly once."""
