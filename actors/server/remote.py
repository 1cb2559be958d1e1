"""The one place where raybroker's plain actor classes become Ray actors (`ray.remote`).

The classes themselves (`PartitionLogActor`, `PartitionHostActor`, `LogManagerActor`, `ControllerActor`,
`GroupCoordinatorActor`) are ordinary Python and are tested without Ray; their options (names,
namespace, placement, restarts, concurrency) come from `actors.options`.
"""

from __future__ import annotations

import ray

from actors.options import LOG_MANAGER_CONCURRENCY_GROUPS, PARTITION_CONCURRENCY_GROUPS
from actors.server.controller import ControllerActor
from actors.server.group_coordinator import GroupCoordinatorActor
from actors.server.log_manager import LogManagerActor
from actors.server.partition_host import PartitionHostActor
from actors.server.partition_log import PartitionLogActor

PartitionLog = ray.remote(concurrency_groups=PARTITION_CONCURRENCY_GROUPS)(PartitionLogActor)
PartitionHost = ray.remote(concurrency_groups=PARTITION_CONCURRENCY_GROUPS)(PartitionHostActor)
LogManager = ray.remote(concurrency_groups=LOG_MANAGER_CONCURRENCY_GROUPS)(LogManagerActor)
Controller = ray.remote(ControllerActor)
GroupCoordinator = ray.remote(GroupCoordinatorActor)
