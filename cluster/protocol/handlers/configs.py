"""DescribeConfigs (key 32), AlterConfigs (key 33), IncrementalAlterConfigs (key 44) and ListConfigResources (key 74):
topic, broker and group configs.

Resources are Kafka's: TOPIC (2) named by the topic, BROKER (4) named by this broker's node id (or "", the
cluster-wide level, which here is the same static config), GROUP (32) named by the group. Each resource gets its own
error code; a request never fails as a whole.

- DescribeConfigs reports every topic config and every broker key with its value, source, synonyms (v1+ when
  asked), type and documentation (v3+ when asked), as `cluster.protocol.config_entries` builds them;
  `configuration_keys` narrows the answer (unknown names are left out, as Kafka does).
- AlterConfigs replaces a topic's overrides with exactly the configs given (what is left out returns to the
  broker's default, Kafka's legacy semantics); IncrementalAlterConfigs applies SET (0), DELETE (1), APPEND (2) and
  SUBTRACT (3) to the current overrides, APPEND/SUBTRACT only to list configs (`cleanup.policy`).
  `validate_only` checks without changing anything. A name that is no topic config, or a value out of Kafka's
  range, answers INVALID_CONFIG (40); a null value to set, a resource or key named twice, or an unknown
  operation answers INVALID_REQUEST (42).
- Broker configs are static in raybroker (`server.properties`) but for the replication throttles
  (`DYNAMIC_BROKER_KEYS`: `leader.replication.throttled.rate`, `follower.replication.throttled.rate`,
  `replica.alter.log.dirs.io.max.bytes.per.second`), which a BROKER resource sets at run time for this broker, or
  for every broker with the name "" (`actors.core.controller.dynamic_broker_configs`), and DescribeConfigs reports
  at Kafka's dynamic levels (described as "", only the keys set for every broker, as Kafka's). Altering any other
  broker key, or a bad throttle value, answers INVALID_REQUEST (Kafka's code for broker configs). A BROKER resource
  naming another node id, or a resource type other than TOPIC, BROKER and GROUP (BROKER_LOGGER, CLIENT_METRICS),
  answers INVALID_REQUEST as well.
- A GROUP resource has Kafka 4.2's group keys (`storage.config.group_config`), described for any group id, existing
  or not, as Kafka's (`ConfigDescriber.group_entries`), and kept by the controller
  (`actors.core.controller.group_config_store`), which checks them and tells the group coordinator. Kafka's answers
  for groups differ from topics' in places, kept here: a key named twice is INVALID_REQUEST "Error due to duplicate
  config keys", a null value to set INVALID_REQUEST "Null value not supported for : <key>", APPEND or SUBTRACT
  INVALID_CONFIG "Can't APPEND to key <key> because its type is not LIST.", the group "" INVALID_REQUEST, and deleting
  a key that is no group key is no error.

ListConfigResources (v1; v0 is Kafka's ListClientMetricsResources) names the config resources of the types asked for
(none: every type), as Kafka 4.2's `KafkaApis`: TOPIC every topic, internal ones included; BROKER and BROKER_LOGGER
every broker's node id; GROUP the groups whose configs the controller keeps or wrote since it started
(`GroupConfigStore.listed`); CLIENT_METRICS none (raybroker keeps no client metrics subscriptions, so v0 answers an
empty list). A type it does not know answers UNSUPPORTED_VERSION (35) and nothing else; it needs DESCRIBE_CONFIGS on
the cluster, else CLUSTER_AUTHORIZATION_FAILED (31). `kafka-configs.sh --entity-type groups --describe` asks it for the
groups to describe, and whether a named group "doesn't exist".

Authorization comes first for each resource, as Kafka's: DescribeConfigs needs DESCRIBE_CONFIGS and the alter APIs
ALTER_CONFIGS, on the topic for a TOPIC resource (else TOPIC_AUTHORIZATION_FAILED, 29), on the cluster for BROKER,
BROKER_LOGGER and CLIENT_METRICS resources (else CLUSTER_AUTHORIZATION_FAILED, 31), on the group for a GROUP
resource (else GROUP_AUTHORIZATION_FAILED, 30).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from enum import IntEnum
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security import acl_bindings as acls
from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.config_entries import LIST_TOPIC_CONFIGS, ConfigDescriber
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import (
    AuthorizationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    error_code,
)
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, allows_cluster
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from storage import file_names
from storage.config.broker_config import DYNAMIC_BROKER_KEYS
from storage.config.config_values import config_fields, kafka_name
from storage.config.log_config import LogConfig
from storage.errors import InvalidConfigError, InvalidRequestError, RaybrokerError

DESCRIBE_CONFIGS_KEY = 32
ALTER_CONFIGS_KEY = 33
INCREMENTAL_ALTER_CONFIGS_KEY = 44
LIST_CONFIG_RESOURCES_KEY = 74
TOPIC_CONFIG_NAMES = frozenset(kafka_name(spec.name) for spec in config_fields(LogConfig))


class ResourceType(IntEnum):
    """Kafka's `ConfigResource.Type` values raybroker serves."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32


# The `ConfigResource.Type` values ListConfigResources v1 names: TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP.
LISTED_TYPES = (ResourceType.TOPIC, ResourceType.BROKER, 8, 16, ResourceType.GROUP)
CLIENT_METRICS_TYPE = 16


# Kafka's `ConfigResource.Type` values that are the cluster's configs for authorization: BROKER, BROKER_LOGGER and
# CLIENT_METRICS (GROUP is authorized on its group).
CLUSTER_CONFIG_TYPES = frozenset({ResourceType.BROKER, 8, 16})


def _check_authorized(
    access: AccessControl | None, context: ConnectionContext, operation: AclOperation, resource: Any
) -> None:
    """Raises the resource's authorization error unless the principal may do `operation` (DESCRIBE_CONFIGS or
    ALTER_CONFIGS) on the config resource (see the module docstring); resource types not served pass unchecked."""
    name = resource.resource_name
    checked: tuple[acls.ResourceType, str]
    denied: type[AuthorizationFailedError]
    if resource.resource_type == ResourceType.TOPIC:
        checked, denied = (acls.ResourceType.TOPIC, name), TopicAuthorizationFailedError
    elif resource.resource_type in CLUSTER_CONFIG_TYPES:
        checked, denied = (acls.ResourceType.CLUSTER, acls.CLUSTER_NAME), ClusterAuthorizationFailedError
    elif resource.resource_type == ResourceType.GROUP:
        checked, denied = (acls.ResourceType.GROUP, name), GroupAuthorizationFailedError
    else:
        return
    if not allows(access, context, operation, *checked):
        raise denied(f"not authorized to {operation.name} of {name!r}")


class AlterOperation(IntEnum):
    """Kafka's `AlterConfigOp.OpType`."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class DescribeConfigsHandler(GuardedHandler[BrokerView]):
    """Answers DescribeConfigs (see the module docstring)."""

    def __init__(
        self, view: BrokerView, describer: ConfigDescriber, node_id: int, access: AccessControl | None = None
    ) -> None:
        super().__init__(view, access)
        self._describer = describer
        self._node_id = node_id

    async def __call__(self, request: Request) -> Any:
        body = request.body
        include_synonyms = getattr(body, "include_synonyms", False)
        include_documentation = getattr(body, "include_documentation", False)
        results = []
        for resource in body.resources:
            try:
                _check_authorized(self._access, request.context, AclOperation.DESCRIBE_CONFIGS, resource)
                entries = await self._entries(resource.resource_type, resource.resource_name)
            except RaybrokerError as exc:
                results.append({**_resource_answer(resource, exc), "configs": []})
                continue
            wanted = resource.configuration_keys
            configs = [
                entry.as_values(include_synonyms, include_documentation)
                for entry in entries
                if wanted is None or entry.name in wanted
            ]
            # Kafka's DescribeConfigs answers a described resource with an empty message, not a null one.
            results.append({**_resource_answer(resource), "error_message": "", "configs": configs})
        return build(
            response_schema(DESCRIBE_CONFIGS_KEY, request.api_version), {"throttle_time": 0, "results": results}
        )

    async def _entries(self, resource_type: int, name: str) -> list[Any]:
        if resource_type == ResourceType.TOPIC:
            file_names.validate_topic(name)
            return self._describer.topic_entries(await self._view.topic_config(name))
        if resource_type == ResourceType.BROKER:
            _check_broker(name, self._node_id)
            own, every = await self._view.broker_configs(name or str(self._node_id))
            return self._describer.broker_entries(own, every, per_broker=name != "")
        if resource_type == ResourceType.GROUP:
            return self._describer.group_entries(*await self._view.group_config(name))
        raise InvalidRequestError(
            f"resource type {resource_type} is not served; only TOPIC (2), BROKER (4) and GROUP (32)"
        )


class AlterConfigsHandler(GuardedHandler[BrokerView]):
    """Answers AlterConfigs and IncrementalAlterConfigs (see the module docstring)."""

    def __init__(
        self,
        view: BrokerView,
        node_id: int,
        topic_defaults: LogConfig,
        incremental: bool,
        access: AccessControl | None = None,
    ) -> None:
        """`topic_defaults` is the broker's default topic config (`BrokerConfig.log_config`)."""
        super().__init__(view, access)
        self._node_id = node_id
        self._default_cleanup_policy = topic_defaults.cleanup_policy
        self._incremental = incremental

    async def __call__(self, request: Request) -> Any:
        body = request.body
        named = Counter((resource.resource_type, resource.resource_name) for resource in body.resources)
        responses = []
        for resource in body.resources:
            try:
                if named[(resource.resource_type, resource.resource_name)] > 1:
                    raise InvalidRequestError(f"resource {resource.resource_name!r} appears more than once")
                _check_authorized(self._access, request.context, AclOperation.ALTER_CONFIGS, resource)
                await self._alter(resource, body.validate_only)
            except RaybrokerError as exc:
                responses.append(_resource_answer(resource, exc))
            else:
                responses.append(_resource_answer(resource))
        api_key = INCREMENTAL_ALTER_CONFIGS_KEY if self._incremental else ALTER_CONFIGS_KEY
        return build(response_schema(api_key, request.api_version), {"throttle_time": 0, "responses": responses})

    async def _alter(self, resource: Any, validate_only: bool) -> None:
        if resource.resource_type == ResourceType.BROKER:
            await self._alter_broker(resource, validate_only)
            return
        if resource.resource_type == ResourceType.GROUP:
            await self._alter_group(resource, validate_only)
            return
        if resource.resource_type != ResourceType.TOPIC:
            raise InvalidRequestError(
                f"resource type {resource.resource_type} cannot be altered; only TOPIC (2), BROKER (4) and GROUP (32)"
            )
        name = resource.resource_name
        file_names.validate_topic(name)
        names = [config.name for config in resource.configs]
        twice = [key for key, count in Counter(names).items() if count > 1]
        if twice:
            raise InvalidRequestError(f"config {twice[0]!r} appears more than once for topic {name!r}")
        unknown = [key for key in names if key not in TOPIC_CONFIG_NAMES]
        if unknown:
            raise InvalidConfigError(f"unknown topic config {unknown[0]!r}")
        if self._incremental:
            current = await self._view.topic_config(name)
            overrides = _apply(current, resource.configs, {"cleanup.policy": self._default_cleanup_policy})
        else:
            overrides = {config.name: _value(config) for config in resource.configs}
        await self._view.set_topic_config(name, overrides, validate_only)

    async def _alter_broker(self, resource: Any, validate_only: bool) -> None:
        """A BROKER resource's alteration: only `DYNAMIC_BROKER_KEYS` (see the module docstring)."""
        broker = resource.resource_name
        _check_broker(broker, self._node_id)
        names = [config.name for config in resource.configs]
        static = sorted({name for name in names if name not in DYNAMIC_BROKER_KEYS})
        if static:
            raise InvalidRequestError(
                f"raybroker's broker configs are static but for the replication throttles: set {static[0]} in "
                "server.properties"
            )
        twice = [key for key, count in Counter(names).items() if count > 1]
        if twice:
            raise InvalidRequestError(f"config {twice[0]!r} appears more than once for broker {broker!r}")
        own, _ = await self._view.broker_configs(broker)
        if self._incremental:
            after = _apply(own, resource.configs, {})
        else:
            after = {config.name: _value(config) for config in resource.configs}
        changes = {name: after.get(name) for name in {*own, *after}}
        await self._view.alter_broker_configs(broker, changes, validate_only)

    async def _alter_group(self, resource: Any, validate_only: bool) -> None:
        """A GROUP resource's alteration, with Kafka's answers for groups (see the module docstring)."""
        group = resource.resource_name
        names = [config.name for config in resource.configs]
        if len(set(names)) < len(names):
            raise InvalidRequestError("Error due to duplicate config keys")
        if not self._incremental:
            await self._view.set_group_config(group, {c.name: _group_value(c) for c in resource.configs}, validate_only)
            return
        configs, _ = await self._view.group_config(group)
        for config in resource.configs:
            operation = config.config_operation
            if operation == AlterOperation.SET:
                configs[config.name] = _group_value(config)
            elif operation == AlterOperation.DELETE:
                configs.pop(config.name, None)
            elif operation in (AlterOperation.APPEND, AlterOperation.SUBTRACT):
                raise InvalidConfigError(
                    f"Can't {AlterOperation(operation).name} to key {config.name} because its type is not LIST."
                )
            else:
                raise InvalidRequestError(f"unknown config operation {operation} for {config.name}")
        await self._view.set_group_config(group, configs, validate_only)


class ListConfigResourcesHandler(GuardedHandler[BrokerView]):
    """Answers ListConfigResources (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        schema = response_schema(LIST_CONFIG_RESOURCES_KEY, request.api_version)
        if not allows_cluster(self._access, request.context, AclOperation.DESCRIBE_CONFIGS):
            return build(
                schema,
                {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "config_resources": []},
            )
        asked = tuple(getattr(request.body, "resource_types", (CLIENT_METRICS_TYPE,))) or LISTED_TYPES
        if any(kind not in LISTED_TYPES for kind in asked):
            return build(
                schema, {"throttle_time": 0, "error_code": ErrorCode.unsupported_version, "config_resources": []}
            )
        found: list[tuple[int, str]] = []
        if ResourceType.GROUP in asked:
            found += [(ResourceType.GROUP, group) for group in await self._view.configured_groups()]
        brokers = [str(broker.node_id) for broker in await self._view.brokers()] if {4, 8} & set(asked) else []
        found += [(kind, node) for kind in (8, ResourceType.BROKER) if kind in asked for node in brokers]
        if ResourceType.TOPIC in asked:
            found += [(ResourceType.TOPIC, topic) for topic in await self._view.topics()]
        resources = [{"resource_name": name, "resource_type": int(kind)} for kind, name in found]
        return build(schema, {"throttle_time": 0, "error_code": ErrorCode.none, "config_resources": resources})


def _group_value(config: Any) -> str:
    if config.value is None:
        raise InvalidRequestError(f"Null value not supported for : {config.name}")
    return str(config.value)


def _resource_answer(resource: Any, exc: RaybrokerError | None = None) -> dict[str, Any]:
    """A resource's entry in a DescribeConfigs or AlterConfigs answer: the resource, and `exc`'s code and message
    (none without `exc`)."""
    return {
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "error_code": ErrorCode.none if exc is None else error_code(exc),
        "error_message": None if exc is None else exc.message,
    }


def _apply(current: dict[str, str], configs: Iterable[Any], defaults: Mapping[str, str]) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs' operations, in request order. APPEND and SUBTRACT start from a
    list config's override, else its broker default in `defaults` (`cleanup.policy`), else empty (the
    throttled-replicas lists)."""
    overrides = dict(current)
    for config in configs:
        operation = config.config_operation
        if operation == AlterOperation.SET:
            overrides[config.name] = _value(config)
        elif operation == AlterOperation.DELETE:
            overrides.pop(config.name, None)
        elif operation in (AlterOperation.APPEND, AlterOperation.SUBTRACT):
            if config.name not in LIST_TOPIC_CONFIGS:
                raise InvalidConfigError(f"{config.name} is not a list config: it cannot be appended to or subtracted")
            base = overrides.get(config.name, defaults.get(config.name, ""))
            items = [item.strip() for item in base.split(",") if item.strip()]
            given = [item.strip() for item in _value(config).split(",") if item.strip()]
            if operation == AlterOperation.APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            overrides[config.name] = ",".join(items)
        else:
            raise InvalidRequestError(f"unknown config operation {operation} for {config.name}")
    return overrides


def _value(config: Any) -> str:
    if config.value is None:
        raise InvalidRequestError(f"a null value is not supported for topic config {config.name}")
    return str(config.value)


def _check_broker(name: str, node_id: int) -> None:
    """A BROKER resource must name this broker (or be "", the cluster-wide level)."""
    if name not in ("", str(node_id)):
        raise InvalidRequestError(f"unexpected broker id {name!r}: this broker is {node_id}")
