"""A partition's replication state as the controller decides it (Kafka's LeaderAndIsr / PartitionRecord).

Replicas are named by the Ray node id of their broker (one broker per node). `replicas` is the assignment, its
first entry the preferred leader; `isr` the replicas in sync with the leader (the leader among them); `leader` the
replica that takes writes ("" while none of the in-sync replicas is alive: the partition is offline); and
`leader_epoch` the number every leader change raises, which followers and clients fence stale leaders by;
`version` (Kafka's partition epoch) rises with every change, leader or ISR, so a replica that receives two states
out of order keeps the newer. `directories` (Kafka's PartitionRecord directories) names, per replica, the
`directory.id` of the log dir holding it ("" while unknown): Ray node ids change when a node restarts, a disk's id
does not, so a disk that comes back on another node is recognised as the replica it holds. During a reassignment
(Kafka's AlterPartitionReassignments) `adding` names the target replicas not yet in sync and `removing` the replicas
that leave once the target is in sync; `replicas` holds both, the target first (Kafka's PartitionRecord
addingReplicas / removingReplicas); `balancer` says the reassignment is the controller's own (a drain, self-healing,
balancing), which `raybroker.balancer.replication.throttle` bounds, rather than an operator's. It is recorded with
the state, so a controller started again goes on throttling the moves its predecessor began. `controller_epoch` is the
epoch of the controller that sent the state (Kafka's LeaderAndIsr controllerEpoch): stamped on each state it tells
a replica, not recorded, and left out of comparisons; a replica refuses a state from an older controller epoch than
one it has heard from, so a controller left running beside its successor changes no replica.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

NO_LEADER = ""
# The controller epoch of a state no controller stamped (one read from the metadata log, or built by hand).
NO_CONTROLLER_EPOCH = -1


class ReplicaSet:
    """A partition's assignment and in-sync replicas, and what they say of it: the rule both `LeaderAndIsr` and the
    admin client's `PartitionDescription` answer by."""

    __slots__ = ()

    replicas: tuple[str, ...]
    isr: tuple[str, ...]

    @property
    def under_replicated(self) -> bool:
        """Fewer replicas in sync than assigned, as `kafka-topics --under-replicated-partitions` lists them."""
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True, slots=True)
class LeaderAndIsr(ReplicaSet):
    """One partition's leader, epoch, assignment and in-sync replicas; see the module docstring."""

    topic: str
    partition: int
    leader: str
    leader_epoch: int
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    version: int = 0
    directories: tuple[str, ...] = ()
    adding: tuple[str, ...] = ()
    removing: tuple[str, ...] = ()
    balancer: bool = False
    controller_epoch: int = field(default=NO_CONTROLLER_EPOCH, compare=False)

    @property
    def replication_factor(self) -> int:
        return len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[str, ...]:
        """The replicas the partition ends with: its assignment without those a reassignment removes."""
        return tuple(node for node in self.replicas if node not in self.removing)

    def with_isr(self, isr: tuple[str, ...]) -> LeaderAndIsr:
        return replace(self, isr=isr, version=self.version + 1)

    def with_leader(self, leader: str, isr: tuple[str, ...]) -> LeaderAndIsr:
        """A new leader (or none) and ISR in the next epoch."""
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=isr, version=self.version + 1)

    def sent_by(self, controller_epoch: int) -> LeaderAndIsr:
        """This state as the controller of `controller_epoch` tells it to a replica."""
        return replace(self, controller_epoch=controller_epoch)

    def directory_of(self, node: str) -> str:
        """The `directory.id` recorded for `node`'s replica ("" if unknown)."""
        index = self.replicas.index(node) if node in self.replicas else -1
        return self.directories[index] if 0 <= index < len(self.directories) else ""

    def with_directory(self, node: str, directory_id: str) -> LeaderAndIsr:
        """`node`'s replica recorded in log dir `directory_id`."""
        known = list(self.directories) + [""] * (len(self.replicas) - len(self.directories))
        known[self.replicas.index(node)] = directory_id
        return replace(self, directories=tuple(known), version=self.version + 1)

    def with_replica_moved(self, old: str, new: str, directory_id: str = "") -> LeaderAndIsr:
        """`old` (a node that is gone) replaced by `new` (the node its log dirs now run on), in the same places; a
        moved leader leads in the next epoch (a new process, as a re-registered Kafka broker)."""
        moved = {old: new}
        state = replace(
            self,
            leader=moved.get(self.leader, self.leader),
            leader_epoch=self.leader_epoch + (1 if self.leader == old else 0),
            replicas=tuple(moved.get(node, node) for node in self.replicas),
            isr=tuple(moved.get(node, node) for node in self.isr),
            version=self.version + 1,
        )
        return state.with_directory(new, directory_id) if directory_id else state

    def with_assignment(
        self, replicas: tuple[str, ...], isr: tuple[str, ...], adding: tuple[str, ...], removing: tuple[str, ...]
    ) -> LeaderAndIsr:
        """New replicas and ISR (the leader unchanged) and reassignment sets; each replica kept keeps its
        recorded log dir, and a reassignment that ends is no longer the balancer's."""
        directories = tuple(self.directory_of(node) for node in replicas) if self.directories else ()
        return replace(
            self,
            replicas=replicas,
            isr=isr,
            adding=adding,
            removing=removing,
            directories=directories,
            version=self.version + 1,
            balancer=self.balancer and bool(adding or removing),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "leader": self.leader,
            "epoch": self.leader_epoch,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "version": self.version,
            "directories": list(self.directories),
            **({"adding": list(self.adding), "removing": list(self.removing)} if self.reassigning else {}),
            **({"balancer": True} if self.reassigning and self.balancer else {}),
        }

    @classmethod
    def from_json(cls, topic: str, partition: int, body: dict[str, object]) -> LeaderAndIsr:
        replicas = tuple(str(node) for node in body["replicas"])  # type: ignore[attr-defined]
        isr = tuple(str(node) for node in body["isr"])  # type: ignore[attr-defined]
        epoch, version = int(body["epoch"]), int(body.get("version", 0))  # type: ignore[call-overload]
        directories = tuple(str(d) for d in body.get("directories", ()))  # type: ignore[attr-defined]
        adding = tuple(str(node) for node in body.get("adding", ()))  # type: ignore[attr-defined]
        removing = tuple(str(node) for node in body.get("removing", ()))  # type: ignore[attr-defined]
        leader, balancer = str(body["leader"]), body.get("balancer") is True
        return cls(topic, partition, leader, epoch, replicas, isr, version, directories, adding, removing, balancer)
