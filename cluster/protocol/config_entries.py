"""Config entries as Kafka's DescribeConfigs and CreateTopics (v5+) report them: name, value, source, synonyms.

A topic's value is its override when it has one (source DYNAMIC_TOPIC_CONFIG), else the broker's default for it, which
comes from the broker key Kafka names its synonym (`retention.ms` <- `log.retention.hours`): STATIC_BROKER_CONFIG
when that key was set in the broker's properties, DEFAULT_CONFIG when it is Kafka's default. Synonyms list every
level that holds a value, most specific first, as Kafka's broker does. A broker's own keys are
STATIC_BROKER_CONFIG or DEFAULT_CONFIG likewise, and read-only: raybroker's broker configs are static (set in
`server.properties`), there are no dynamic broker configs to alter. A password key (`ssl.key.password`) is sensitive:
reported with a null value at every level, as Kafka reports it, so DescribeConfigs never carries a secret.

A group's keys (`storage.config.group_config`, the GROUP resource) are its own value when it sets one (source
GROUP_CONFIG), else the broker's (source DEFAULT_CONFIG, whatever set the broker's key, as Kafka 4.2 reports them),
never read-only, with one synonym: the entry itself.

Values are Kafka's strings (`render_value`); an optional broker key left unset (`log.retention.ms`) has a null
value, as in Kafka. `cleanup.policy` is reported as Kafka's LIST type, although `LogConfig` keeps it as its text.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import Field, dataclass
from enum import IntEnum

from storage.config.broker_config import DYNAMIC_BROKER_KEYS, BrokerConfig
from storage.config.config_values import JavaType, config_fields, config_key, kafka_name, render_value
from storage.config.group_config import GROUP_CONFIG_KEYS
from storage.config.log_config import LogConfig

# Topic configs whose Kafka type is LIST: the only ones IncrementalAlterConfigs may APPEND to or SUBTRACT from.
LIST_TOPIC_CONFIGS = frozenset(
    {"cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
)


class ConfigSource(IntEnum):
    """Kafka's `DescribeConfigsResponse.ConfigSource` (the values raybroker can report)."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


class ConfigType(IntEnum):
    """Kafka's `ConfigDef.Type` as DescribeConfigs v3+ numbers it."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7
    PASSWORD = 9


_CONFIG_TYPES: dict[JavaType, ConfigType] = {
    "boolean": ConfigType.BOOLEAN,
    "string": ConfigType.STRING,
    "int": ConfigType.INT,
    "long": ConfigType.LONG,
    "double": ConfigType.DOUBLE,
    "list": ConfigType.LIST,
    "password": ConfigType.PASSWORD,
}


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One level holding a value for a config: the key at that level, its value and the level."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs reports it (see the module docstring)."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    config_type: ConfigType
    documentation: str | None
    synonyms: tuple[ConfigSynonym, ...]

    def as_values(self, include_synonyms: bool = True, include_documentation: bool = True) -> dict[str, object]:
        """The entry as `messages.build` values of DescribeConfigs' and CreateTopics' config structs."""
        return {
            "name": self.name,
            "value": self.value,
            "read_only": self.read_only,
            "config_source": int(self.source),
            "is_sensitive": self.config_type is ConfigType.PASSWORD,
            "synonyms": [
                {"name": synonym.name, "value": synonym.value, "source": int(synonym.source)}
                for synonym in (self.synonyms if include_synonyms else ())
            ],
            "config_type": int(self.config_type),
            "documentation": self.documentation if include_documentation else None,
        }


class ConfigDescriber:
    """Describes topic and broker configs over one broker's config (see the module docstring).

    `static_keys` are the broker keys (Kafka names) its properties set explicitly.
    """

    def __init__(self, broker_config: BrokerConfig, static_keys: Collection[str]) -> None:
        self._broker = broker_config
        self._static = frozenset(static_keys)
        self._synonyms = broker_config.topic_config_synonyms()
        self._broker_values = {
            kafka_name(spec.name): _rendered(spec, getattr(broker_config, spec.name))
            for spec in config_fields(BrokerConfig)
        }
        self._broker_defaults = {
            kafka_name(spec.name): _rendered(spec, spec.default) for spec in config_fields(BrokerConfig)
        }

    def topic_entries(self, overrides: Mapping[str, str]) -> list[ConfigEntry]:
        """Every topic config, in `LogConfig`'s order, for a topic with `overrides`."""
        entries = []
        defaults = self._broker.log_config
        for spec in config_fields(LogConfig):
            name = kafka_name(spec.name)
            broker_key = self._synonyms.get(name)
            broker_levels = () if broker_key is None else self._broker_levels(broker_key)
            synonyms = broker_levels
            value = render_value(getattr(defaults, spec.name))
            source = broker_levels[0].source if broker_levels else ConfigSource.DEFAULT_CONFIG
            if name in overrides:
                value, source = overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
                synonyms = (ConfigSynonym(name, value, source), *broker_levels)
            java_type = config_key(spec).java_type
            config_type = ConfigType.LIST if name in LIST_TOPIC_CONFIGS else _CONFIG_TYPES[java_type]
            entries.append(ConfigEntry(name, value, source, False, config_type, config_key(spec).doc or None, synonyms))
        return entries

    def broker_entries(
        self,
        dynamic: Mapping[str, str] | None = None,
        dynamic_defaults: Mapping[str, str] | None = None,
        per_broker: bool = True,
    ) -> list[ConfigEntry]:
        """Every broker key this broker has, in `BrokerConfig`'s order, as Kafka's `createBrokerConfigEntry`:
        `DYNAMIC_BROKER_KEYS` with the values set at run time for this broker (`dynamic`) and for every broker
        (`dynamic_defaults`) first (Kafka lists no default level for them), every other key read-only. Described as
        every broker's level (`per_broker` False, the resource ""), a key keeps only its run-time default level."""
        entries = []
        for spec in config_fields(BrokerConfig):
            name = kafka_name(spec.name)
            levels = self._broker_levels(name)
            if name in DYNAMIC_BROKER_KEYS:
                levels = (
                    *_dynamic_levels(name, dynamic or {}, dynamic_defaults or {}),
                    *(level for level in levels if level.source != ConfigSource.DEFAULT_CONFIG),
                )
            if not per_broker:
                levels = tuple(level for level in levels if level.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
                if not levels:
                    continue
            java_type = config_key(spec).java_type
            doc = config_key(spec).doc or None
            entries.append(
                ConfigEntry(
                    name,
                    levels[0].value if levels else self._broker_values[name],
                    levels[0].source if levels else ConfigSource.DEFAULT_CONFIG,
                    name not in DYNAMIC_BROKER_KEYS,
                    _CONFIG_TYPES[java_type],
                    doc,
                    levels,
                )
            )
        return entries

    @staticmethod
    def group_entries(overrides: Mapping[str, str], defaults: Mapping[str, str]) -> list[ConfigEntry]:
        """Every group key, in Kafka 4.2's order, for a group whose GROUP resource sets `overrides`, where the broker's
        values are `defaults` (the controller's: it checks the groups' configs against the same broker config)."""
        entries = []
        for key in GROUP_CONFIG_KEYS:
            value, source = defaults[key.name], ConfigSource.DEFAULT_CONFIG
            if key.name in overrides:
                value, source = overrides[key.name], ConfigSource.GROUP_CONFIG
            synonym = ConfigSynonym(key.name, value, source)
            entries.append(
                ConfigEntry(key.name, value, source, False, _CONFIG_TYPES[key.java_type], key.doc, (synonym,))
            )
        return entries

    def _broker_levels(self, broker_key: str) -> tuple[ConfigSynonym, ...]:
        """The broker's levels for one of its keys: the value set in its properties if any, then Kafka's default."""
        default = ConfigSynonym(broker_key, self._broker_defaults[broker_key], ConfigSource.DEFAULT_CONFIG)
        if broker_key not in self._static:
            return (default,)
        return (ConfigSynonym(broker_key, self._broker_values[broker_key], ConfigSource.STATIC_BROKER_CONFIG), default)


def _dynamic_levels(
    name: str, dynamic: Mapping[str, str], dynamic_defaults: Mapping[str, str]
) -> tuple[ConfigSynonym, ...]:
    """A dynamic broker key's run-time levels, this broker's before every broker's, each only when set."""
    levels = []
    if name in dynamic:
        levels.append(ConfigSynonym(name, dynamic[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
    if name in dynamic_defaults:
        levels.append(ConfigSynonym(name, dynamic_defaults[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
    return tuple(levels)


def _rendered(spec: Field[object], value: object) -> str | None:
    """A broker key's value as reported: Kafka's text, or null when unset or secret."""
    return None if value is None or config_key(spec).java_type == "password" else render_value(value)
