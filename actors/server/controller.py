"""The controller actor: the cluster's metadata, one per cluster, pinned to the node holding it.

State it owns, and where it is persisted: a compacted metadata log, `__cluster_metadata-0` in the
metadata dir (Kafka's `metadata.log.dir`; by default the first of `log.dirs` on the node that started
the cluster), written through `storage.Log` like any partition, so it has Kafka's crash guarantees.
Its records (JSON values, readable with `raybroker dump-log --print-data-log`):

| key                | value                                                            |
|--------------------|------------------------------------------------------------------|
| `cluster`          | `{"cluster_id": ...}`                                            |
| `topic/<name>`     | `{"partitions": {"0": "<ray node id>", ...}, "config": {...}}`, a null value once deleted |
| `producer-ids`     | `{"next": N}`: the next idempotent-producer id to hand out       |
| `acl/<resource type>/<pattern type>/<name>` | `{"acls": [{"principal", "host", "operation", "permission_type"}]}` |
| `scram/<mechanism>/<user>` | `{"mechanism", "salt", "stored_key", "server_key", "iterations"}` |

An `acl/` record holds every binding of one resource pattern, e.g. `acl/TOPIC/PREFIXED/orders-`
(`actors.server.security.acl_store`); a `scram/` record one user's credential for one mechanism, bytes in
base64, never the password (`actors.server.security.credential_store`); either gets a null value once deleted.

On start the log is replayed (latest value per key), so a restarted broker finds its topics again.
Which brokers are registered is not persisted: a controller restarted by Ray finds the log managers
still running on the cluster's live nodes by name; after a full restart each `start_broker` registers.
Neither are the Kafka listeners' advertised addresses (`register_listener`), which each listener announces when
it starts and withdraws when it stops; Metadata names a node's partitions' leader by them.
The ACL version (`acls_version`) is the offset after the last ACL record, so it moves with every ACL change
and survives a restart: the Kafka listeners poll it and rebuild their authorizer only when it moved.
Which node hosts a partition is decided here (the node whose broker holds the fewest partitions);
which log dir holds it is decided by that node's log manager. Topic names follow Kafka's rules (and
`__cluster_metadata`, the controller's own folder, is reserved); configs must be a mapping validated
against Kafka's names and ranges before anything is written.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from actors.options import NAMESPACE, log_manager_name
from actors.server.security.acl_store import ACL_KEY_PREFIX, AclStore
from actors.server.security.acls import AclBinding, AclBindingFilter
from actors.server.security.credential_store import SCRAM_KEY_PREFIX, ScramCredentialStore
from actors.server.security.scram import ScramCredential
from storage import file_names
from storage.arguments import is_int
from storage.clock import SYSTEM_CLOCK
from storage.config.broker_config import BrokerConfig
from storage.config.log_config import LogConfig
from storage.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage.logdir.log_dirs import METADATA_TOPIC
from storage.logdir.log_manager import PartitionPlacement
from storage.logdir.meta_properties import new_directory_id
from storage.partition.log import Log
from storage.records.record_batch import RecordBatchBuilder

# A topic may have at most this many partitions: each is an actor process (~120 MiB), so far more
# than a cluster of this kind can host is refused up front instead of exhausting memory.
MAX_PARTITIONS_PER_TOPIC = 10_000
INTERNAL_TOPICS = frozenset({METADATA_TOPIC, "__consumer_offsets"})


@dataclass(frozen=True, slots=True)
class AdvertisedListener:
    """Where Kafka clients reach the broker of one Ray node: its Kafka `node.id`, its first advertised address,
    and every advertised listener as (listener name, host, port)."""

    broker_id: int
    host: str
    port: int
    listeners: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic's partitions (partition -> Ray node id) and its config overrides (Kafka names)."""

    name: str
    partitions: dict[int, str]
    config: dict[str, str]

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class ControllerActor:
    """Cluster metadata; see the module docstring. Calls are serialised by one lock."""

    def __init__(self, metadata_dir: str, broker_config: dict[str, str]) -> None:
        self.config = BrokerConfig.from_properties(broker_config)
        self._lock = threading.RLock()
        folder = Path(metadata_dir) / file_names.partition_dir_name(METADATA_TOPIC, 0)
        self._log = Log.open(folder, LogConfig(cleanup_policy="compact", segment_index_bytes=1024 * 1024))
        self._topics: dict[str, TopicMetadata] = {}
        self._next_producer_id = 0
        self._cluster_id = ""
        self._acls = AclStore(self._write)
        self._scram = ScramCredentialStore(self._write)
        self._replay()
        if not self._cluster_id:
            self._cluster_id = new_directory_id()
            self._write("cluster", {"cluster_id": self._cluster_id})
        self._brokers: dict[str, Any] = _running_log_managers()
        self._listeners: dict[str, AdvertisedListener] = {}

    def _replay(self) -> None:
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for record in self._log.records():
            if record.key is not None:
                latest[record.key] = (record.offset, record.value)
        for key, (offset, value) in latest.items():
            name = key.decode("utf-8")
            if name.startswith(ACL_KEY_PREFIX):
                self._acls.load(name, None if value is None else json.loads(value), offset)
                continue
            if value is None:
                continue
            body = json.loads(value)
            if name == "cluster":
                self._cluster_id = body["cluster_id"]
            elif name == "producer-ids":
                self._next_producer_id = int(body["next"])
            elif name.startswith("topic/"):
                topic = name[len("topic/") :]
                partitions = {int(p): node for p, node in body["partitions"].items()}
                self._topics[topic] = TopicMetadata(topic, partitions, dict(body["config"]))
            elif name.startswith(SCRAM_KEY_PREFIX):
                self._scram.load(name, body)

    def _write(self, key: str, value: dict[str, Any] | None) -> int:
        """Appends the record (a null value for None) and flushes it; returns its offset."""
        builder = RecordBatchBuilder()
        payload = None if value is None else json.dumps(value, sort_keys=True).encode("utf-8")
        builder.append(key.encode("utf-8"), payload, timestamp=SYSTEM_CLOCK.milliseconds())
        info = self._log.append(builder.build())
        self._log.flush()
        return info.last_offset

    def _persist_topic(self, topic: TopicMetadata) -> None:
        self._write(
            f"topic/{topic.name}",
            {"partitions": {str(p): node for p, node in topic.partitions.items()}, "config": topic.config},
        )
        self._topics[topic.name] = topic

    # --- brokers ---------------------------------------------------------------------------------

    def cluster_id(self) -> str:
        return self._cluster_id

    def register_broker(self, node_id: str) -> None:
        """A node's log manager announces itself (idempotent). The partitions its disks hold are placed
        on it: Ray node ids change when a cluster restarts, the folders on disk do not."""
        with self._lock:
            handle = ray.get_actor(log_manager_name(node_id), namespace=NAMESPACE)
            self._brokers[node_id] = handle
            placements: list[PartitionPlacement] = ray.get(handle.partitions.remote())
            for placement in placements:
                topic = self._topics.get(placement.topic)
                if topic is None or topic.partitions.get(placement.partition) == node_id:
                    continue
                partitions = {**topic.partitions, placement.partition: node_id}
                self._persist_topic(TopicMetadata(topic.name, partitions, topic.config))

    def unregister_broker(self, node_id: str) -> None:
        with self._lock:
            self._brokers.pop(node_id, None)
            self._listeners.pop(node_id, None)

    def brokers(self) -> list[str]:
        return sorted(self._brokers)

    def register_listener(self, node_id: str, listener: AdvertisedListener) -> None:
        """The Kafka listener of Ray node `node_id` announces where clients reach it (again: the latest wins).
        Two nodes cannot share a Kafka `node.id`: `InvalidConfigError` naming the node that has it."""
        if not isinstance(listener, AdvertisedListener) or not is_int(listener.broker_id):
            raise InvalidConfigError(f"not an advertised listener: {listener!r}")
        with self._lock:
            for other_node, other in self._listeners.items():
                if other_node != node_id and other.broker_id == listener.broker_id:
                    raise InvalidConfigError(
                        f"node.id {listener.broker_id} is already the broker on Ray node {other_node} "
                        f"({other.host}:{other.port}); give each node's broker its own node.id"
                    )
            self._listeners[node_id] = listener

    def unregister_listener(self, node_id: str, listener: AdvertisedListener) -> None:
        """A stopping listener withdraws its address, unless another listener of the node announced since."""
        with self._lock:
            if self._listeners.get(node_id) == listener:
                del self._listeners[node_id]

    def listeners(self) -> dict[str, AdvertisedListener]:
        """Ray node id -> its Kafka listener's advertised address, for the nodes whose listener runs."""
        with self._lock:
            return dict(self._listeners)

    def _broker(self, node_id: str) -> Any:
        handle = self._brokers.get(node_id)
        if handle is None:
            raise BrokerNotAvailableError(f"the broker on node {node_id} is not running")
        return handle

    def _place(self, count: int) -> list[str]:
        """Nodes for `count` new partitions: each goes to the broker holding the fewest partitions."""
        if not self._brokers:
            raise BrokerNotAvailableError("no broker is registered; start one with `raybroker start`")
        load = dict.fromkeys(self._brokers, 0)
        for topic in self._topics.values():
            for node in topic.partitions.values():
                if node in load:
                    load[node] += 1
        chosen = []
        for _ in range(count):
            node = min(sorted(load), key=lambda n: load[n])
            chosen.append(node)
            load[node] += 1
        return chosen

    # --- topics ----------------------------------------------------------------------------------

    def _validated_config(self, config: Mapping[str, str] | None) -> dict[str, str]:
        if config is not None and not isinstance(config, Mapping):
            raise InvalidConfigError(f"a topic config must be a mapping, not {type(config).__name__}")
        overrides = {str(k): str(v) for k, v in (config or {}).items()}
        LogConfig.from_properties(overrides, base=self.config.log_config)
        return overrides

    def create_topic(
        self, name: str, partitions: int, config: dict[str, str] | None = None, validate_only: bool = False
    ) -> TopicMetadata:
        """Creates the topic's partitions on the least-loaded brokers (Kafka's CreateTopics). If a partition
        cannot be created, the topic is deleted again (with the partitions that were) and the error raised.
        With `validate_only`, runs every check and places the partitions but writes and creates nothing."""
        file_names.validate_topic(name)
        if name == METADATA_TOPIC:
            raise InvalidTopicError(f"topic name {name!r} is reserved for the cluster metadata log")
        _check_partition_count(partitions)
        overrides = self._validated_config(config)
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            # Kafka's rule: metric names turn '.' into '_', so 'a.b' and 'a_b' may not both exist.
            colliding = [t for t in self._topics if t.replace(".", "_") == name.replace(".", "_")]
            if colliding:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {colliding[0]!r}")
            nodes = self._place(partitions)
            topic = TopicMetadata(name, dict(enumerate(nodes)), overrides)
            if validate_only:
                return topic
            self._persist_topic(topic)
            try:
                self._create_partitions(topic, range(partitions))
            except BaseException:
                self.delete_topic(name)
                raise
            return topic

    def _create_partitions(self, topic: TopicMetadata, partitions: range) -> None:
        """Creates the partitions on their brokers; if any fails, raises its error once every creation has
        ended, so that the caller's rollback never overtakes a creation still running."""
        refs = [
            self._broker(topic.partitions[p]).create_partition.remote(topic.name, p, topic.config) for p in partitions
        ]
        ray.wait(refs, num_returns=len(refs))
        ray.get(refs)

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> TopicMetadata:
        """Grows a topic to `total` partitions (Kafka's CreatePartitions; topics never shrink). If a new
        partition cannot be created, the topic goes back to its old partitions and the error is raised.
        With `validate_only`, runs every check and places the partitions but writes and creates nothing."""
        _check_partition_count(total)
        with self._lock:
            topic = self.describe_topic(name)
            current = len(topic.partitions)
            if total <= current:
                raise InvalidPartitionsError(f"topic {name!r} has {current} partitions; {total} would not grow it")
            partitions = dict(topic.partitions)
            for partition, node in zip(range(current, total), self._place(total - current), strict=True):
                partitions[partition] = node
            grown = TopicMetadata(name, partitions, topic.config)
            if validate_only:
                return grown
            self._persist_topic(grown)
            try:
                self._create_partitions(grown, range(current, total))
            except BaseException:
                self._persist_topic(topic)
                ray.get(
                    [
                        self._brokers[grown.partitions[p]].delete_partition.remote(name, p)
                        for p in range(current, total)
                        if grown.partitions[p] in self._brokers
                    ]
                )
                raise
            return grown

    def alter_topic_config(self, name: str, config: dict[str, str]) -> TopicMetadata:
        """Merges `config` into the topic's overrides and applies it to every partition."""
        with self._lock:
            return self.set_topic_config(name, {**self.describe_topic(name).config, **config})

    def set_topic_config(self, name: str, config: dict[str, str], validate_only: bool = False) -> TopicMetadata:
        """Replaces the topic's overrides with `config` (keys left out go back to the broker's defaults, as Kafka's
        AlterConfigs) and applies them to every partition; with `validate_only`, only checks them."""
        with self._lock:
            topic = self.describe_topic(name)
            merged = self._validated_config(config)
            altered = TopicMetadata(name, topic.partitions, merged)
            if validate_only:
                return altered
            self._persist_topic(altered)
            nodes = sorted(set(topic.partitions.values()))
            ray.get([self._broker(node).set_topic_config.remote(name, merged) for node in nodes])
            return altered

    def delete_topic(self, name: str) -> None:
        """Kafka-style async delete: partitions stop now, their folders are removed after the delay."""
        with self._lock:
            topic = self.describe_topic(name)
            self._write(f"topic/{name}", None)
            del self._topics[name]
            refs = [
                self._brokers[node].delete_partition.remote(name, p)
                for p, node in topic.partitions.items()
                if node in self._brokers
            ]
        ray.get(refs)

    def describe_topic(self, name: str) -> TopicMetadata:
        topic = self._topics.get(name) if isinstance(name, str) else None
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return topic

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(name for name in self._topics if include_internal or name not in INTERNAL_TOPICS)

    def topics(self) -> dict[str, TopicMetadata]:
        return dict(self._topics)

    def topic_configs(self) -> dict[str, dict[str, str]]:
        return {name: dict(topic.config) for name, topic in self._topics.items()}

    # --- producer ids ----------------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A fresh idempotent-producer id, durable before it is handed out."""
        with self._lock:
            producer_id = self._next_producer_id
            self._write("producer-ids", {"next": producer_id + 1})
            self._next_producer_id = producer_id + 1
            return producer_id

    # --- security: SCRAM credentials and ACLs ----------------------------------------------------

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
        """The ACL version (see the module docstring) and every binding."""
        with self._lock:
            return self._acls.version, self._acls.bindings()

    def acls_version(self) -> int:
        with self._lock:
            return self._acls.version

    def shutdown(self) -> None:
        with self._lock:
            self._log.close()


def _running_log_managers() -> dict[str, Any]:
    """node id -> handle of every log manager running on a live node (none when the cluster starts)."""
    found = {}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        try:
            found[node["NodeID"]] = ray.get_actor(log_manager_name(node["NodeID"]), namespace=NAMESPACE)
        except ValueError:
            continue
    return found


def _check_partition_count(partitions: object) -> None:
    if not is_int(partitions):
        raise InvalidPartitionsError(f"partition count must be an int, not {type(partitions).__name__}")
    if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitionsError(f"partition count {partitions} is outside 1..{MAX_PARTITIONS_PER_TOPIC}")
