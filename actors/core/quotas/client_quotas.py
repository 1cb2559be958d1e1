"""The cluster's client quotas, as the controller keeps them (Kafka's `ClientQuotaControlManager` and
`ClientQuotasImage`): AlterClientQuotas and DescribeClientQuotas, and which quota applies to a connection.

An entity is a set of (entity type, name) pairs, the name None for the type's default: `user`, `client-id`, both, or
`ip` alone (`kafka-configs --entity-type users --entity-name alice --entity-type clients --entity-default`). Each
entity holds quota values by key: `producer_byte_rate` and `consumer_byte_rate` (whole bytes a second),
`request_percentage` and `controller_mutation_rate` (any positive number) for users and client ids,
`connection_creation_rate` (a whole number) for an ip. Validation is Kafka's, with its INVALID_REQUEST messages: a
type other than those, a type twice, an empty name, ip with user or client-id, an unknown key, a key twice in one
alteration, a value not above 0 or fractional where a whole number is due; an entity named twice in one request is
refused as a duplicate, each other entity is applied on its own (one entity's error leaves the others).

Records of the metadata log, one per entity holding every value it has:

    key    quota/<entity as JSON: [[type, name or null], ...] in type order>
    value  {"values": {key: value, ...}}                        (a tombstone once no value is left)

The store writes before it changes its memory, so what it answers is always on disk.

Which quota applies (`limit`), in Kafka's order for a connection of user U and client id C: user U with client C,
U with the default client, U alone, the default user with C, the default user with the default client, the default
user alone, client C alone, the default client alone. The entity that answered also names who shares the budget
(`sharing`): a quota set for a user is one budget for all its client ids, a default client quota one budget per
client id, as Kafka's quota metric tags do.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from actors.core.security.acl_store import WriteRecord
from storage.errors import InvalidRequestError, RaybrokerError

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# Each key an entity of users or client ids may hold, and whether its value must be a whole number (Kafka's LONG).
USER_CLIENT_KEYS = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
IP_KEYS = {CONNECTION_CREATION_RATE: True}
QUOTA_KEY_PREFIX = "quota/"
# DescribeClientQuotas' match types.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2
# The largest whole value Kafka's LONG (and INT, for an ip's rate) quota keys take.
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# An entity: (type, name or None) pairs sorted by type, each type once.
Entity = tuple[tuple[str, str | None], ...]


class UnknownEntityTypeError(RaybrokerError):
    """A DescribeClientQuotas filter names an entity type Kafka does not know (UNSUPPORTED_VERSION, Kafka's code)."""


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One entity's alteration as AlterClientQuotas carries it: `ops` maps a key to its new value, None removes it.
    `entity` is as the client sent it (unchecked pairs, in its order)."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True, slots=True)
class FilterComponent:
    """One component of a DescribeClientQuotas filter (Kafka's ComponentData)."""

    entity_type: str
    match_type: int
    match: str | None


def checked_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """`pairs` as an `Entity`; `InvalidRequestError` with Kafka's message if it is not one an alteration may name."""
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise InvalidRequestError(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in ENTITY_TYPES:
            raise InvalidRequestError(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise InvalidRequestError(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise InvalidRequestError("Invalid empty client quota entity")
    if IP in seen and len(seen) > 1:
        raise InvalidRequestError(
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
        )
    return tuple(sorted(seen.items()))


def valid_keys(entity: Entity) -> Mapping[str, bool]:
    """The keys `entity` may hold, each with whether it takes whole numbers only."""
    return IP_KEYS if entity[0][0] == IP else USER_CLIENT_KEYS


def check_value(entity: Entity, key: str, value: float) -> None:
    """`InvalidRequestError` (Kafka's message) unless `entity` may hold `value` under `key`."""
    keys = valid_keys(entity)
    if key not in keys:
        raise InvalidRequestError(f"Invalid configuration key {key}")
    if not value > 0.0:
        raise InvalidRequestError(f"Quota {key} must be greater than 0")
    if keys[key]:
        largest = INT_MAX if entity[0][0] == IP else LONG_MAX
        if value > largest:
            kind = "an INT" if largest == INT_MAX else "a LONG"
            raise InvalidRequestError(f"Proposed value for {key} is too large for {kind}.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise InvalidRequestError(f"{key} cannot be a fractional value.")


def entity_key(entity: Entity) -> str:
    return QUOTA_KEY_PREFIX + json.dumps([list(pair) for pair in entity], separators=(",", ":"))


def parse_entity_key(key: str) -> Entity:
    if not key.startswith(QUOTA_KEY_PREFIX):
        raise InvalidRequestError(f"not a client quota record key: {key!r}")
    return checked_entity((str(kind), None if name is None else str(name)) for kind, name in json.loads(key[6:]))


class ClientQuotaStore:
    """Every client quota of the cluster, entity -> key -> value; see the module docstring. Not thread-safe: the
    controller's lock serialises its calls. `version` is the metadata offset after the last quota record, so it
    moves with every change and survives a restart: a listener reloads the quotas only when it moved."""

    def __init__(self, write: WriteRecord) -> None:
        self._write = write
        self._quotas: dict[Entity, dict[str, float]] = {}
        self.version = 0

    def load(self, key: str, value: Mapping[str, object] | None, offset: int) -> None:
        """Replays the latest record of `key` (a `quota/...` key; None for a tombstone), found at `offset`."""
        entity = parse_entity_key(key)
        values = {} if value is None else dict(value["values"])  # type: ignore[call-overload]
        self._set(entity, {str(name): float(number) for name, number in values.items()}, offset)

    def alter(self, alterations: Iterable[QuotaAlteration], validate_only: bool = False) -> list[str | None]:
        """Kafka's AlterClientQuotas: per alteration, None if applied (or, with `validate_only`, valid) or the
        message of its INVALID_REQUEST (see the module docstring)."""
        alterations = list(alterations)
        named: dict[tuple[tuple[str, str | None], ...], int] = {}
        for alteration in alterations:
            named[alteration.entity] = named.get(alteration.entity, 0) + 1
        results: list[str | None] = []
        for alteration in alterations:
            try:
                if named[alteration.entity] > 1:
                    raise InvalidRequestError(f"Ignoring duplicate entity {_describe(alteration.entity)}")
                entity, values = self._altered(alteration)
            except InvalidRequestError as exc:
                results.append(str(exc))
                continue
            if not validate_only and values != self._quotas.get(entity, {}):
                offset = self._write(entity_key(entity), {"values": values} if values else None)
                self._set(entity, values, offset)
            results.append(None)
        return results

    def describe(self, components: Iterable[FilterComponent], strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        """Kafka's DescribeClientQuotas: each entity the filter matches, with its values. `InvalidRequestError`
        for a malformed filter, `UnknownEntityTypeError` for an unknown entity type (Kafka's answers)."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for component in components:
            kind = component.entity_type
            if not kind:
                raise InvalidRequestError("Invalid empty entity type.")
            if kind in exact or kind in specified:
                raise InvalidRequestError(f"Entity type {kind} cannot appear more than once in the filter.")
            if kind not in ENTITY_TYPES:
                raise UnknownEntityTypeError(f"Unsupported entity type {kind}")
            if component.match_type == MATCH_EXACT:
                if component.match is None:
                    raise InvalidRequestError("Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[kind] = component.match
            elif component.match_type == MATCH_DEFAULT:
                if component.match is not None:
                    raise InvalidRequestError(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                    )
                exact[kind] = None
            elif component.match_type == MATCH_SPECIFIED:
                if component.match is not None:
                    raise InvalidRequestError(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                    )
                specified.add(kind)
            else:
                raise InvalidRequestError(f"Unknown match type {component.match_type}")
        named = set(exact) | specified
        if IP in named and named & {USER, CLIENT_ID}:
            raise InvalidRequestError(
                "Invalid entity filter component combination. IP filter component should not be used with user or "
                "clientId filter component."
            )
        found = []
        for entity, values in self._quotas.items():
            pairs = dict(entity)
            if strict and len(pairs) != len(named):
                continue
            if all(kind in pairs and pairs[kind] == name for kind, name in exact.items()) and specified <= set(pairs):
                found.append((entity, dict(values)))
        return found

    def quotas(self) -> dict[Entity, dict[str, float]]:
        """A copy of every entity's values."""
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def _altered(self, alteration: QuotaAlteration) -> tuple[Entity, dict[str, float]]:
        entity = checked_entity(alteration.entity)
        ops: dict[str, float | None] = {}
        for key, value in alteration.ops:
            if key in ops:
                raise InvalidRequestError(
                    f"Duplicate quota key {key} not updating quota for this entity {_describe(alteration.entity)}"
                )
            ops[key] = value
        values = dict(self._quotas.get(entity, {}))
        for key, value in ops.items():
            if value is None:
                values.pop(key, None)
            else:
                check_value(entity, key, value)
                values[key] = float(value)
        return entity, values

    def _set(self, entity: Entity, values: dict[str, float], offset: int) -> None:
        if values:
            self._quotas[entity] = values
        else:
            self._quotas.pop(entity, None)
        self.version = max(self.version, offset + 1)


def _describe(pairs: Iterable[tuple[str, str | None]]) -> str:
    """An entity as Kafka's `ClientQuotaEntity.toString` writes it."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{kind}={name}" for kind, name in pairs) + "})"


def limit(
    quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[float, Entity] | None:
    """The quota under `key` for a connection of `user` (the principal's name) and `client_id`, and the entity that
    shares its budget (see the module docstring); None if no entity sets one."""
    levels: tuple[Entity, ...] = (
        ((CLIENT_ID, client_id), (USER, user)),
        ((CLIENT_ID, None), (USER, user)),
        ((USER, user),),
        ((CLIENT_ID, client_id), (USER, None)),
        ((CLIENT_ID, None), (USER, None)),
        ((USER, None),),
        ((CLIENT_ID, client_id),),
        ((CLIENT_ID, None),),
    )
    for entity in levels:
        value = quotas.get(entity, {}).get(key)
        if value is not None:
            return value, tuple((kind, user if kind == USER else client_id) for kind, _ in entity)
    return None
