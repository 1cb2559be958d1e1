"""The cluster's settings a controller keeps beside its topics: client quotas (`actors.core.quotas.client_quotas`),
groups' own configs (`actors.core.controller.group_config_store`), broker configs set at run time and the replication
throttles derived from them
(`actors.core.controller.dynamic_broker_configs`, `actors.core.quotas.replication_quotas`), finalized features
(`actors.core.controller.finalized_features`), and the security records: SCRAM credentials
(`actors.core.security.credential_store`) and ACLs (`actors.core.security.acl_store`). A mixin of `Controller`,
whose stores, state and lock it works on (declared below for the type checker only)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from actors.core.controller.dynamic_broker_configs import DEFAULT_BROKER, DynamicBrokerConfigs
from actors.core.controller.finalized_features import FeatureUpdate, FinalizedFeatures
from actors.core.controller.group_config_store import GroupConfigStore, GroupConfigVersion
from actors.core.controller.topic_metadata import AdvertisedListener, TopicMetadata
from actors.core.quotas.client_quotas import ClientQuotaStore, Entity, FilterComponent, QuotaAlteration
from actors.core.quotas.replication_quotas import ALL_PARTITIONS, FOLLOWER, LEADER, ReplicationThrottles
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.security.acl_bindings import AclBinding, AclBindingFilter
from actors.core.security.acl_store import AclStore
from actors.core.security.credential_store import ScramCredentialStore
from actors.core.security.scram import ScramCredential
from storage.config.broker_config import BrokerConfig
from storage.config.throttled_replicas import ThrottledReplicas
from storage.errors import RaybrokerError

logger = logging.getLogger(__name__)


class ClusterSettings:
    """Client quotas, run-time broker configs, replication throttles, features, SCRAM credentials and ACLs, for
    `Controller`."""

    if TYPE_CHECKING:
        config: BrokerConfig
        _lock: threading.RLock
        _topics: dict[str, TopicMetadata]
        _listeners: dict[str, AdvertisedListener]
        _quotas: ClientQuotaStore
        _broker_configs: DynamicBrokerConfigs
        _group_configs: GroupConfigStore
        _group_config_changed: Callable[[str, GroupConfigVersion], None] | None
        _features: FinalizedFeatures
        _scram: ScramCredentialStore
        _acls: AclStore

        def balancer_moves(self) -> list[LeaderAndIsr]: ...

    def alter_client_quotas(self, alterations: list[QuotaAlteration], validate_only: bool = False) -> list[str | None]:
        """Kafka's AlterClientQuotas: per alteration, None if applied (or valid), else its INVALID_REQUEST message."""
        with self._lock:
            return self._quotas.alter(alterations, validate_only)

    def describe_client_quotas(
        self, components: list[FilterComponent], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        """Kafka's DescribeClientQuotas: each entity the filter matches, with its values."""
        with self._lock:
            return self._quotas.describe(components, strict)

    def alter_broker_configs(self, broker: str, changes: Mapping[str, str | None], validate_only: bool = False) -> None:
        """Sets (or, for None, deletes) run-time configs of broker `broker` ("" for every broker): Kafka's
        IncrementalAlterConfigs on a BROKER resource (`actors.core.controller.dynamic_broker_configs`)."""
        with self._lock:
            self._broker_configs.alter(broker, changes, validate_only)

    def broker_configs(self, broker: str) -> tuple[dict[str, str], dict[str, str]]:
        """The run-time configs of broker `broker`'s own level and of every broker's level."""
        with self._lock:
            return self._broker_configs.configs(broker), self._broker_configs.configs(DEFAULT_BROKER)

    def set_group_config(self, group: str, configs: Mapping[str, str], validate_only: bool = False) -> None:
        """Replaces the group's own configs with `configs` (Kafka's AlterConfigs on a GROUP resource; the alter
        handlers give IncrementalAlterConfigs' outcome), checked first; then the group coordinator is told, outside the
        lock (`actors.core.controller.group_config_store`)."""
        with self._lock:
            written = self._group_configs.set(group, configs, validate_only)
        if written is None or self._group_config_changed is None:
            return
        try:
            self._group_config_changed(group, written)
        except RaybrokerError as exc:
            logger.warning("group %s's configs changed, but the group coordinator was not told: %s", group, exc)

    def group_config(self, group: str) -> tuple[dict[str, str], dict[str, str]]:
        """The keys group `group` sets, and every group key's value where a group sets none (the broker's)."""
        with self._lock:
            return self._group_configs.configs(group), self._group_configs.defaults()

    def configured_groups(self) -> list[str]:
        """The groups ListConfigResources names (`GroupConfigStore.listed`)."""
        with self._lock:
            return self._group_configs.listed()

    def group_configs(self) -> dict[str, GroupConfigVersion]:
        """Every group's own configs with their versions, for the group coordinator's start."""
        with self._lock:
            return self._group_configs.every_group()

    def replication_throttles(self, node_id: str, broker_id: int | None = None) -> ReplicationThrottles:
        """The replication throttles of the broker on node `node_id` (`actors.core.quotas.replication_quotas`): its
        rates set at run time, and the partitions its topics' throttled-replicas configs list for its `node.id`:
        its listener's, else `broker_id` (the node's own config; None: only `*` lists apply). The controller's own
        moves (`balancer_moves`) are throttled too while `raybroker.balancer.replication.throttle` is not -1: on
        their current replicas as leaders and their added ones as followers, at that rate where none is set."""
        with self._lock:
            listener = self._listeners.get(node_id)
            broker = broker_id if listener is None else listener.broker_id
            sides: dict[str, set[tuple[str, int]]] = {LEADER: set(), FOLLOWER: set()}
            for topic in self._topics.values():
                for side, throttled in sides.items():
                    name = f"{side}.replication.throttled.replicas"
                    if not topic.config.get(name):
                        continue
                    listed = ThrottledReplicas.parse(name, topic.config[name])
                    partitions = listed.partitions_of(-1 if broker is None else broker)
                    if partitions is None:
                        throttled.add((topic.name, ALL_PARTITIONS))
                    else:
                        throttled.update((topic.name, partition) for partition in partitions)
            rates = {
                side: self._broker_configs.rate(broker, f"{side}.replication.throttled.rate")
                for side in (LEADER, FOLLOWER)
            }
            balancer_rate = self.config.raybroker_balancer_replication_throttle
            for state in self.balancer_moves() if balancer_rate >= 0 else ():
                key = (state.topic, state.partition)
                role = FOLLOWER if node_id in state.adding else LEADER if node_id in state.replicas else None
                if role is not None:
                    sides[role].add(key)
                    rates[role] = balancer_rate if rates[role] is None else rates[role]
            return ReplicationThrottles(
                rates[LEADER], rates[FOLLOWER], frozenset(sides[LEADER]), frozenset(sides[FOLLOWER])
            )

    def client_quotas_version(self) -> int:
        """A number that moves with every quota change (the listeners poll it, as the ACL version)."""
        with self._lock:
            return self._quotas.version

    def client_quotas(self) -> tuple[int, dict[Entity, dict[str, float]]]:
        """The quotas' version and every entity's values, for the listeners that enforce them."""
        with self._lock:
            return self._quotas.version, self._quotas.quotas()

    def update_features(self, updates: list[FeatureUpdate], validate_only: bool, controller: str) -> None:
        """Kafka's UpdateFeatures: all written, or none (`InvalidUpdateVersionError` naming `controller`)."""
        with self._lock:
            self._features.update(updates, validate_only, controller)

    def finalized_features(self) -> tuple[int, dict[str, int]]:
        """The finalized features' epoch and levels (none at 0), for ApiVersions."""
        with self._lock:
            return self._features.epoch, self._features.levels()

    def upsert_scram_credential(self, user: str, credential: ScramCredential) -> None:
        """Sets `user`'s credential for its mechanism (Kafka's AlterUserScramCredentials upsertion)."""
        with self._lock:
            self._scram.upsert(user, credential)

    def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        """Deletes `user`'s credential for `mechanism`; False if there was none."""
        with self._lock:
            return self._scram.delete(user, mechanism)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            return self._scram.get(user, mechanism)

    def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        """user -> mechanism -> credential, for every user that has one."""
        with self._lock:
            return self._scram.credentials()

    def create_acls(self, bindings: list[AclBinding]) -> None:
        """Adds the bindings (Kafka's CreateAcls; an existing binding is left as it is)."""
        with self._lock:
            self._acls.create(bindings)

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Deletes every binding a filter matches; per filter, the bindings it matched (Kafka's DeleteAcls)."""
        with self._lock:
            return self._acls.delete(filters)

    def acls(self) -> tuple[int, list[AclBinding]]:
        """The ACL version (`AclStore.version`: it moves with every ACL change) and every binding."""
        with self._lock:
            return self._acls.version, self._acls.bindings()

    def acls_version(self) -> int:
        with self._lock:
            return self._acls.version
