"""A partition's replication state as the controller decides it (Kafka's LeaderAndIsr / PartitionRecord).

Replicas are named by the Ray node id of their broker (one broker per node). `replicas` is the assignment, its
first entry the preferred leader; `isr` the replicas in sync with the leader (the leader among them); `leader` the
replica that takes writes ("" while none of the in-sync replicas is alive: the partition is offline); and
`leader_epoch` the number every leader change raises, which followers and clients fence stale leaders by;
`version` (Kafka's partition epoch) rises with every change, leader or ISR, so a replica that receives two states
out of order keeps the newer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

NO_LEADER = ""


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """One partition's leader, epoch, assignment and in-sync replicas; see the module docstring."""

    topic: str
    partition: int
    leader: str
    leader_epoch: int
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    version: int = 0

    @property
    def replication_factor(self) -> int:
        return len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER

    @property
    def under_replicated(self) -> bool:
        """Fewer replicas in sync than assigned, as `kafka-topics --under-replicated-partitions` lists them."""
        return len(self.isr) < len(self.replicas)

    def with_isr(self, isr: tuple[str, ...]) -> LeaderAndIsr:
        return replace(self, isr=isr, version=self.version + 1)

    def with_leader(self, leader: str, isr: tuple[str, ...]) -> LeaderAndIsr:
        """A new leader (or none) and ISR in the next epoch."""
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=isr, version=self.version + 1)

    def with_replica_moved(self, old: str, new: str) -> LeaderAndIsr:
        """`old` (a node that is gone) replaced by `new` (the node its log dirs now run on), in the same places."""
        moved = {old: new}
        return replace(
            self,
            leader=moved.get(self.leader, self.leader),
            replicas=tuple(moved.get(node, node) for node in self.replicas),
            isr=tuple(moved.get(node, node) for node in self.isr),
            version=self.version + 1,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "leader": self.leader,
            "epoch": self.leader_epoch,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "version": self.version,
        }

    @classmethod
    def from_json(cls, topic: str, partition: int, body: dict[str, object]) -> LeaderAndIsr:
        replicas = tuple(str(node) for node in body["replicas"])  # type: ignore[attr-defined]
        isr = tuple(str(node) for node in body["isr"])  # type: ignore[attr-defined]
        epoch, version = int(body["epoch"]), int(body.get("version", 0))  # type: ignore[call-overload]
        return cls(topic, partition, str(body["leader"]), epoch, replicas, isr, version)
