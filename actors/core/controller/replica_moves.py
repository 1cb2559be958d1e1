"""The controller's replica moves, each a reassignment (`actors.core.controller.reassignment`, Kafka's KIP-455):
those Kafka's AlterPartitionReassignments asks for, a broker's drain before its node is removed, self-healing of
the replicas of brokers lost for good (`actors.core.controller.self_healing`), internal topics growing to their
replication factor as brokers join, and balancing replicas over the running brokers
(`actors.core.controller.balancing`). A mixin of `Controller`, whose
state and lock it works on (declared below for the type checker only)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from actors.core.controller.balancing import balancing_moves
from actors.core.controller.node_broker import NodeBroker
from actors.core.controller.reassignment import cancelled, check_target, completed, reassigned
from actors.core.controller.self_healing import (
    blocked,
    due,
    grown_replicas,
    healed_replicas,
    replaced_replicas,
    replica_counts,
)
from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicMetadata
from actors.core.replication.leader_and_isr import LeaderAndIsr
from storage.config.broker_config import BrokerConfig
from storage.errors import (
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    RaybrokerError,
)
from storage.pending import collect

logger = logging.getLogger(__name__)

# The most moves one `balance` starts by default (Cruise Control's `max.num.cluster.partition.movements`).
BALANCE_MOVES = 1250
# The most partitions one self-healing pass moves (the next pass, `HEAL_CHECK_MS` later, moves more).
HEALS_PER_PASS = 8


class ReplicaMoves:
    """Reassignments, drains and self-healing, for `Controller` (see the module docstring)."""

    # Set when this controller grew `__transaction_state`, until its `min.insync.replicas` was raised to match.
    _transaction_state_grown = False
    # Whether node_add autobalancing is under way (`_balance_onto_empty_brokers`).
    _autobalancing = False

    if TYPE_CHECKING:
        config: BrokerConfig
        _lock: threading.RLock
        _brokers: dict[str, NodeBroker]
        _topics: dict[str, TopicMetadata]
        _draining: set[str]
        _lost_at_ms: dict[str, int]

        def partition_state(self, topic: str, partition: int) -> LeaderAndIsr: ...

        def partition_states(self) -> list[LeaderAndIsr]: ...

        def _persist_state(self, state: LeaderAndIsr) -> LeaderAndIsr: ...

        def _push(self, states: Iterable[LeaderAndIsr], only: str | None = None) -> None: ...

        def _broker(self, node_id: str) -> NodeBroker: ...

        def _placeable(self) -> list[str]: ...

        def alter_topic_config(self, name: str, config: Mapping[str, str]) -> TopicMetadata: ...

    def alter_partition_reassignments(
        self, requests: Mapping[tuple[str, int], Sequence[str] | None], allow_replication_factor_change: bool = True
    ) -> dict[tuple[str, int], RaybrokerError | None]:
        """Kafka's AlterPartitionReassignments: per partition, a move to its target replicas or (None) a cancel
        (`actors.core.controller.reassignment`; completed at once if nothing is added, else by `alter_partition`).
        Each partition's error, None where accepted: `UnknownTopicOrPartitionError`, `InvalidReplicaAssignmentError`
        (no replica, one twice, a broker not running), `NoReassignmentInProgressError` (a cancel with none), and,
        unless `allow_replication_factor_change` (KIP-860), `InvalidReplicationFactorError` for a target with
        another count of replicas than the partition ends with now (its replicas, less those a move removes)."""
        outcome: dict[tuple[str, int], RaybrokerError | None] = {}
        for (topic, partition), target in requests.items():
            try:
                self._reassign(
                    topic, partition, target, keep_factor=not allow_replication_factor_change, balancer=False
                )
            except RaybrokerError as exc:
                outcome[(topic, partition)] = exc
            else:
                outcome[(topic, partition)] = None
        return outcome

    def _reassign(
        self,
        topic: str,
        partition: int,
        target: Sequence[str] | None,
        *,
        keep_factor: bool = False,
        balancer: bool = True,
    ) -> None:
        """One partition's move to `target` (None: its cancel); `balancer` says the controller's own moves (drains,
        self-healing, balancing, internal topics growing) from an operator's, which `raybroker.balancer.replication.
        throttle` bounds (`balancer_moves`)."""
        with self._lock:
            state = self.partition_state(topic, partition)
            if target is None:
                new = cancelled(state, self._brokers)
            else:
                checked = check_target(target, self._brokers)
                if keep_factor and len(checked) != len(state.target):
                    raise InvalidReplicationFactorError(
                        f"The replication factor is changed from {len(state.target)} to {len(checked)}"
                    )
                new = reassigned(state, checked)
                if new.replicas == state.replicas and not new.reassigning and not state.reassigning:
                    return
                new = replace(new, balancer=balancer and new.reassigning)
                new = self._create_replicas(new, [node for node in new.adding if node not in state.replicas])
            new = self._persist_state(new)
            final = completed(new, self._brokers)
            if final is not None:
                new = self._persist_state(final)
        self._push([new])
        self._delete_replicas(state, new)

    def _create_replicas(self, state: LeaderAndIsr, nodes: list[str]) -> LeaderAndIsr:
        """Creates the partition's replica on each of `nodes` (empty; it fetches once told its state); returns the
        state with the log dirs they landed in."""
        topic = self._topics[state.topic]
        created = collect(
            [
                self._broker(node).create_partition(topic.name, state.partition, topic.config, topic.topic_id)
                for node in nodes
            ]
        )
        for node, placement in zip(nodes, created, strict=True):
            if placement.directory_id:
                state = state.with_directory(node, placement.directory_id)
        return state

    def _delete_replicas(self, before: LeaderAndIsr, after: LeaderAndIsr) -> None:
        """Deletes the replicas `before` had and `after` has not, on the brokers still running (Kafka's StopReplica
        with deletion); a failure is logged (the folder is found stray when its broker starts again)."""
        gone = [node for node in before.replicas if node not in after.replicas and node in self._brokers]
        pending = [(node, self._broker(node).delete_partitions(after.topic, [after.partition])) for node in gone]
        for node, deletion in pending:
            try:
                deletion.result()
            except RaybrokerError as exc:
                logger.warning("replica %s-%d on %s not deleted: %s", after.topic, after.partition, node, exc)

    def balancer_moves(self) -> list[LeaderAndIsr]:
        """The states of the partitions the controller is moving itself (drains, self-healing, balancing), which
        `raybroker.balancer.replication.throttle` bounds (`ClusterSettings.replication_throttles`, which every
        broker's processes poll): the recorded states are scanned as they are, since a partition without a
        replication record is moving in no reassignment."""
        with self._lock:
            return [
                state
                for topic in self._topics.values()
                for state in topic.replication.values()
                if state.balancer and state.reassigning
            ]

    def partition_reassignments(self) -> list[LeaderAndIsr]:
        """Kafka's ListPartitionReassignments: the states of the partitions being reassigned."""
        with self._lock:
            return [state for state in self.partition_states() if state.reassigning]

    def drain_broker(self, node_id: str, dry_run: bool = False) -> list[tuple[str, int, tuple[str, ...]]]:
        """Moves every replica off broker `node_id` before its node is removed (Cruise Control's remove_broker, by
        `actors.core.controller.self_healing`'s rule): each partition with a replica there is reassigned with that
        replica replaced by the running broker that holds none of the partition and the fewest replicas of all,
        its leadership moving with it; no new replica goes to the broker meanwhile. Returns the moves (topic,
        partition, target replicas); with `dry_run` only says them. `InvalidReplicaAssignmentError`, nothing moved,
        if the broker is not registered or a partition cannot move (`self_healing.blocked`)."""
        with self._lock:
            if node_id not in self._brokers:
                raise InvalidReplicaAssignmentError(f"no broker is registered on node {node_id}")
            states = self.partition_states()
            running = [node for node in self._placeable() if node != node_id]
            counts = replica_counts(states, running)
            moves = []
            for state in states:
                if node_id not in state.replicas:
                    continue
                why = blocked(state, {node_id}, running)
                if why is not None:
                    raise InvalidReplicaAssignmentError(
                        f"the broker on node {node_id} cannot be drained: "
                        f"{state.topic}-{state.partition} cannot move: {why}"
                    )
                moves.append((state.topic, state.partition, replaced_replicas(state, {node_id}, running, counts)))
            if dry_run:
                return moves
            self._draining.add(node_id)
            for topic, partition, target in moves:
                self._reassign(topic, partition, target)
        return moves

    def balance(self, dry_run: bool = False, limit: int = BALANCE_MOVES) -> list[tuple[str, int, tuple[str, ...]]]:
        """Spreads replicas evenly over the running brokers not being drained (`balancing.balancing_moves`), so a
        broker that joined takes its share; up to `limit` moves, each a reassignment. Returns the moves (topic,
        partition, target replicas); with `dry_run` only says them."""
        with self._lock:
            moves = balancing_moves(self.partition_states(), self._placeable(), limit)
            if not dry_run:
                for topic, partition, target in moves:
                    self._reassign(topic, partition, target)
        return moves

    def _balance_onto_empty_brokers(self) -> None:
        """With `raybroker.balancer.partition.autobalancing.mode=node_add` (Redpanda's mode of that name): once a
        running broker not being drained holds no replica while another holds two or more, the replicas are
        balanced (`balance`) `HEALS_PER_PASS` moves a pass, pass after pass, until no move is left and none is under
        way, so a broker that joined takes its share (each move creates a replica with a call to its broker, which
        the monitor pass's elections must not wait behind for long)."""
        if self.config.raybroker_balancer_partition_autobalancing_mode != "node_add":
            return
        with self._lock:
            if not self._autobalancing:
                counts = replica_counts(self.partition_states(), self._placeable())
                empty = sorted(node for node, count in counts.items() if count == 0)
                if not empty or max(counts.values()) < 2:
                    return
                self._autobalancing = True
                logger.info("broker(s) %s hold no replica: balancing replicas onto them (node_add)", empty)
            moves = self.balance(limit=HEALS_PER_PASS)
            if not moves and not any(state.reassigning for state in self.partition_states()):
                self._autobalancing = False
                logger.info("replicas balanced (node_add)")

    def _heal_lost_replicas(self, now_ms: int) -> None:
        """Self-healing (`actors.core.controller.self_healing`): each partition with a replica on a broker lost
        longer than `raybroker.balancer.node.loss.grace.ms` is reassigned with a running broker in that replica's
        place, `HEALS_PER_PASS` at a time (the monitor pass runs it: each move creates a replica with a call to its
        broker, which elections and fencing must not wait behind for long). A lost broker no partition names any
        more is forgotten."""
        with self._lock:
            lost = due(self._lost_at_ms, now_ms, self.config.raybroker_balancer_node_loss_grace_ms)
            if not lost:
                return
            states = self.partition_states()
            named = {node for state in states for node in state.replicas}
            for node in lost - named:
                del self._lost_at_ms[node]
            running = self._placeable()
            counts = replica_counts(states, running)
            moves = []
            for state in states:
                target = healed_replicas(state, lost, running, counts)
                if target is not None:
                    moves.append((state, target))
                if len(moves) == HEALS_PER_PASS:
                    break
        for state, target in moves:
            logger.warning(
                "%s-%d: replicas %s lost longer than raybroker.balancer.node.loss.grace.ms; moving to %s",
                state.topic,
                state.partition,
                list(state.replicas),
                list(target),
            )
            try:
                self._reassign(state.topic, state.partition, target)
            except RaybrokerError as exc:
                logger.warning("%s-%d not healed: %s", state.topic, state.partition, exc)

    def _grow_internal_topics(self) -> None:
        """The internal topics a cluster's first broker created alone (`offsets.topic.replication.factor` and
        `transaction.state.log.replication.factor` are capped at the brokers running then) gain replicas as brokers
        join, up to those factors: each partition short of its factor is reassigned with running brokers added
        (`self_healing.grown_replicas`), `HEALS_PER_PASS` at a time, as Kafka's internal topics have their factor
        from the start (Kafka creates them only once that many brokers run). Once this controller grew every
        partition of `__transaction_state`, the topic's `min.insync.replicas`, capped at the replicas it was created
        with, rises to `transaction.state.log.min.isr` (capped at the replicas it has now), as Kafka creates it."""
        wanted = {
            CONSUMER_OFFSETS_TOPIC: self.config.offsets_topic_replication_factor,
            TRANSACTION_STATE_TOPIC: self.config.transaction_state_log_replication_factor,
        }
        with self._lock:
            short = [
                state
                for name in wanted
                if name in self._topics
                for state in self._topics[name].states()
                if len(state.replicas) < wanted[name]
            ]
            running = self._placeable()
            counts = replica_counts(self.partition_states(), running) if short else {}
            moves = []
            for state in short:
                target = grown_replicas(state, wanted[state.topic], running, counts)
                if target is not None:
                    moves.append((state, target))
                    self._transaction_state_grown |= state.topic == TRANSACTION_STATE_TOPIC
                if len(moves) == HEALS_PER_PASS:
                    break
            raised_min_isr = self._transaction_state_min_isr() if self._transaction_state_grown and not moves else None
        for state, target in moves:
            logger.info(
                "%s-%d: %d replicas, %d wanted; adding %s",
                state.topic,
                state.partition,
                len(state.replicas),
                wanted[state.topic],
                [node for node in target if node not in state.replicas],
            )
            try:
                self._reassign(state.topic, state.partition, target)
            except RaybrokerError as exc:
                logger.warning("%s-%d not grown: %s", state.topic, state.partition, exc)
        if raised_min_isr is not None:
            try:
                self.alter_topic_config(TRANSACTION_STATE_TOPIC, {"min.insync.replicas": raised_min_isr})
            except RaybrokerError as exc:
                logger.warning("%s: min.insync.replicas not raised yet: %s", TRANSACTION_STATE_TOPIC, exc)
                return
            logger.info("%s: min.insync.replicas raised to %s", TRANSACTION_STATE_TOPIC, raised_min_isr)
            with self._lock:
                self._transaction_state_grown = False

    def _transaction_state_min_isr(self) -> str | None:
        """`__transaction_state`'s `min.insync.replicas` once its moves are done, when above its own (None
        otherwise): `transaction.state.log.min.isr`, capped at its partitions' fewest replicas. The passes ask again
        until it is raised (or needs no raise)."""
        states = self._topics[TRANSACTION_STATE_TOPIC].states()
        if any(state.reassigning for state in states):
            return None
        wanted = min(self.config.transaction_state_log_min_isr, *(len(state.replicas) for state in states))
        config = self._topics[TRANSACTION_STATE_TOPIC].config
        if wanted > int(config.get("min.insync.replicas", self.config.min_insync_replicas)):
            return str(wanted)
        self._transaction_state_grown = False
        return None
