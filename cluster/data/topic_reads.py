"""`read_topic`: topics as a Ray Data Dataset, from their logs (`cluster.data.datasource`) or, with
`history="table"`, from the Iceberg tables they are kept as and then their logs (`cluster.data.table_history`)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from ray.data import Dataset

from cluster.data.datasource import read_plan, read_settings
from cluster.data.read_planning import Bound, plan_topic_read
from storage.arguments import is_int
from storage.errors import InvalidRequestError


def read_topic(
    topics: str | Sequence[str],
    *,
    start: Bound = "earliest",
    end: Bound = "latest",
    isolation: str = "read_committed",
    columns: Sequence[str] | None = None,
    value_format: str = "binary",
    value_schema: pa.DataType | pa.Schema | None = None,
    fail_on_data_loss: bool = True,
    override_num_blocks: int | None = None,
    history: str = "log",
) -> Dataset:
    """Topics as a Ray Data Dataset, read from the partitions where they lie (see the module docstring); the
    bounds are `cluster.data.read_planning`'s. With `history="table"`, topics kept as Iceberg tables are read from
    their table and then their log (`cluster.data.table_history`). Raises the typed errors of a bad read here, before
    any task starts."""
    if override_num_blocks is not None and (not is_int(override_num_blocks) or override_num_blocks < 1):
        raise InvalidRequestError(f"override_num_blocks must be a positive int, got {override_num_blocks!r}")
    if history not in ("log", "table"):
        raise InvalidRequestError(f"history must be 'log' or 'table', got {history!r}")
    if history == "table":
        # Here, not at the top: the table's read needs pyiceberg (~0.7 s to import), which a read of the log alone
        # never loads.
        from cluster.data.table_history import read_table_and_tail

        return read_table_and_tail(
            topics,
            start=start,
            end=end,
            isolation=isolation,
            columns=columns,
            value_format=value_format,
            value_schema=value_schema,
            fail_on_data_loss=fail_on_data_loss,
            override_num_blocks=override_num_blocks,
        )
    plan = plan_topic_read(topics, start=start, end=end, isolation=isolation, fail_on_data_loss=fail_on_data_loss)
    settings = read_settings(
        plan,
        columns=columns,
        value_format=value_format,
        value_schema=value_schema,
        fail_on_data_loss=fail_on_data_loss,
    )
    return read_plan(plan, settings, override_num_blocks)
