"""The one place where raybroker's plain actor classes become Ray actors (`ray.remote`).

The classes themselves (`PartitionLogActor`, `LogManagerActor`, `ControllerActor`,
`GroupCoordinatorActor`) are ordinary Python and are tested without Ray; their options (names,
namespace, placement, restarts, concurrency) come from `actors.options`.
"""

from __future__ import annotations

import ray

from actors.controller import ControllerActor
from actors.group_coordinator import GroupCoordinatorActor
from actors.log_manager import LogManagerActor
from actors.options import PARTITION_CONCURRENCY_GROUPS
from actors.partition_log import PartitionLogActor

PartitionLog = ray.remote(concurrency_groups=PARTITION_CONCURRENCY_GROUPS)(PartitionLogActor)
LogManager = ray.remote(LogManagerActor)
Controller = ray.remote(ControllerActor)
GroupCoordinator = ray.remote(GroupCoordinatorActor)
