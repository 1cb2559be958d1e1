"""Where the read tasks of a `read_topic` ran, against where their partitions' leaders are: the check that reads
are local (the `ray_data_locality` benchmark, the multi-node tests, a user wondering why a read is slow).

Ray Data 2.60 keeps, with each block of a materialized Dataset, the node of the task that made it and the task's
index in its operator (`BlockExecStats`); the block's own `topic` and `partition` columns say what it holds. A
read task is counted once per (operator task index, node, partitions of its blocks), and is local when every
partition of its blocks is led from the node it ran on. The blocks are fetched to learn their partitions, so
this is for diagnosis, not for every read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import ray
from ray.data import Dataset
from ray.data.block import BlockAccessor

from storage.errors import InvalidRequestError
from storage.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class ReadLocality:
    """Read tasks of a read, and how many of them ran on the node of their partitions' leader."""

    tasks: int
    local_tasks: int
    rows: int

    @property
    def share(self) -> float:
        return self.local_tasks / self.tasks if self.tasks else 1.0


def read_locality(dataset: Dataset, leaders: Mapping[TopicPartition, str]) -> ReadLocality:
    """The locality of `dataset`'s read tasks (see the module docstring): `dataset` is materialized first if it
    is not, and must keep the `topic` and `partition` columns; `leaders` maps each partition to its leader's node
    (a plan's `leaders`)."""
    materialized = dataset.materialize()
    tasks: dict[tuple[int | None, str, frozenset[TopicPartition]], bool] = {}
    rows = 0
    for bundle in materialized.iter_internal_ref_bundles():
        for entry in bundle.blocks:
            stats = entry.metadata.exec_stats
            if stats is None:
                raise InvalidRequestError("a block has no execution stats: this Dataset was not read by Ray Data")
            block = BlockAccessor.for_block(ray.get(entry.ref)).to_arrow()
            if "topic" not in block.column_names or "partition" not in block.column_names:
                raise InvalidRequestError("read_locality needs the topic and partition columns")
            pairs = block.select(["topic", "partition"]).group_by(["topic", "partition"]).aggregate([])
            partitions = frozenset((row["topic"], row["partition"]) for row in pairs.to_pylist())
            tasks[(stats.task_idx, stats.node_id, partitions)] = all(
                leaders.get(tp) == stats.node_id for tp in partitions
            )
            rows += block.num_rows
    return ReadLocality(len(tasks), sum(tasks.values()), rows)
