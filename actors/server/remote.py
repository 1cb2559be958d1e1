"""The broker's service actors as Ray actors (`ray.remote`): controller, log manager, group coordinator (the
transaction coordinator is wrapped in its own module, `actors.server.transaction_coordinator_actor`, as the controller
starts it too).

Each class is ordinary Python wrapped here once, with its concurrency groups; `start_broker`
(`actors.clients.broker`) creates them, with the options of `actors.options`. The actors are tested on a
local Ray (`tests/actors/server/`); the log manager's logic is the plain `storage.logdir.log_manager.LogManager`,
tested without Ray. Partition actors and partition hosts are wrapped where they are created, in
`actors.server.ray_partitions`.
"""

from __future__ import annotations

import ray

from actors.options import CONTROLLER_CONCURRENCY_GROUPS, LOG_MANAGER_CONCURRENCY_GROUPS
from actors.server.controller_actor import ControllerActor
from actors.server.group_coordinator_actor import GroupCoordinatorActor
from actors.server.log_manager_actor import LogManagerActor

# `concurrency_groups` is a documented `ray.remote` option that Ray's type stubs omit.
LogManager = ray.remote(concurrency_groups=LOG_MANAGER_CONCURRENCY_GROUPS)(  # type: ignore[call-overload]
    LogManagerActor
)
Controller = ray.remote(concurrency_groups=CONTROLLER_CONCURRENCY_GROUPS)(  # type: ignore[call-overload]
    ControllerActor
)
GroupCoordinator = ray.remote(GroupCoordinatorActor)
