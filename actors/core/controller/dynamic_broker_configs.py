"""The broker configs set at run time, as the controller keeps them (Kafka's `ConfigurationControlManager` for BROKER
resources): `kafka-configs.sh --alter --entity-type brokers --entity-name 1` (one broker) or `--entity-default`
(every broker), and what `kafka-reassign-partitions.sh --throttle` sets and `--verify` deletes.

Only `DYNAMIC_BROKER_KEYS` may be set: the replication throttles. A value is a whole number of bytes a second, at
least 0 (Kafka's LONG with `atLeast(0)`); anything else is INVALID_REQUEST with Kafka's wording (Kafka answers a bad
broker config so, where a bad topic config is INVALID_CONFIG), and an alteration with any bad key changes nothing.
Deleting a key that is not set is no error, as in Kafka.

Records of the metadata log, one per broker level holding every key it sets:

    key    broker-config/<broker id, or "" for every broker>
    value  {"configs": {key: value, ...}}                        (a tombstone once no key is left)

The store writes before it changes its memory, so what it answers is always on disk.
"""

from __future__ import annotations

from collections.abc import Mapping

from actors.core.security.acl_store import WriteRecord
from storage.config.broker_config import DYNAMIC_BROKER_KEYS
from storage.config.config_values import LONG_MAX
from storage.errors import InvalidRequestError

BROKER_CONFIG_KEY_PREFIX = "broker-config/"
# The level every broker takes a key from when its own level does not set it (Kafka's `--entity-default`).
DEFAULT_BROKER = ""


class DynamicBrokerConfigs:
    """Every broker level's run-time configs; see the module docstring. Not thread-safe: the controller's lock
    serialises its calls."""

    def __init__(self, write: WriteRecord) -> None:
        self._write = write
        self._levels: dict[str, dict[str, str]] = {}

    def load(self, key: str, value: Mapping[str, object] | None) -> None:
        """Replays the latest record of `key` (a `broker-config/...` key; None for a tombstone)."""
        broker = key[len(BROKER_CONFIG_KEY_PREFIX) :]
        configs = {} if value is None else value.get("configs", {})
        if isinstance(configs, Mapping) and configs:
            self._levels[broker] = {str(name): str(number) for name, number in configs.items()}
        else:
            self._levels.pop(broker, None)

    def alter(self, broker: str, changes: Mapping[str, str | None], validate_only: bool = False) -> None:
        """Sets (a str) or deletes (None) each key of `changes` at level `broker` (a broker id, or "" for every
        broker). `InvalidRequestError` for a key that cannot be set at run time or a value Kafka refuses."""
        if broker != DEFAULT_BROKER and not broker.isdigit():
            raise InvalidRequestError(f"broker id must be an integer or empty for the default, not {broker!r}")
        refused = sorted(name for name in changes if name not in DYNAMIC_BROKER_KEYS)
        if refused:
            raise InvalidRequestError(f"Cannot update these configs dynamically: {refused}")
        configs = dict(self._levels.get(broker, {}))
        for name, value in changes.items():
            if value is None:
                configs.pop(name, None)
            else:
                configs[name] = str(_rate(name, value))
        if validate_only or configs == self._levels.get(broker, {}):
            return
        self._write(BROKER_CONFIG_KEY_PREFIX + broker, {"configs": configs} if configs else None)
        if configs:
            self._levels[broker] = configs
        else:
            self._levels.pop(broker, None)

    def configs(self, broker: str) -> dict[str, str]:
        """The keys level `broker` sets ("" for every broker's level)."""
        return dict(self._levels.get(broker, {}))

    def rate(self, broker: int | None, name: str) -> int | None:
        """Key `name` as broker `broker` takes it at run time (its own level, else every broker's); None when
        neither sets it (the broker's static config applies)."""
        for level in (() if broker is None else (str(broker),)) + (DEFAULT_BROKER,):
            value = self._levels.get(level, {}).get(name)
            if value is not None:
                return int(value)
        return None


def _rate(name: str, value: str) -> int:
    """A throttle rate as Kafka parses it: a whole number from 0 to Long.MAX_VALUE."""
    try:
        rate = int(value.strip())
    except ValueError:
        message = f"Invalid value {value} for configuration {name}: Not a number of type LONG"
        raise InvalidRequestError(message) from None
    if not 0 <= rate <= LONG_MAX:
        raise InvalidRequestError(f"Invalid value {rate} for configuration {name}: Value must be at least 0")
    return rate
