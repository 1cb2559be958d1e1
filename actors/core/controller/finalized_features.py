"""The cluster's feature levels, as the controller keeps them (Kafka's `FeatureControlManager`): which level of each
feature the cluster runs at (finalized), UpdateFeatures, and what ApiVersions tells clients.

Features the cluster supports (`SUPPORTED_FEATURES`, inclusive level ranges): `metadata.version` at 21 only (Kafka's
3.9-IV0). raybroker's metadata log is its own, not Kafka's records: the level names the Kafka release whose metadata
features raybroker's match, for the tools that print it, and does not move. `transaction.version` 0-2: at 2 Kafka 4
producers use transactions v2 (KIP-890 part 2: no AddPartitionsToTxn, an epoch bump at every EndTxn), below it
transactions v1; the protocol serves both whatever the level, as Kafka's does (a client picks by the finalized level).
`group.version` 0-1: at 1 the group coordinator serves Kafka 4's consumer group protocol (KIP-848:
ConsumerGroupHeartbeat and ConsumerGroupDescribe answer UNSUPPORTED_VERSION below it, as Kafka 4.2's do, the classic
protocol serving either way). `share.version` 0-1: at 1 the listener serves share groups (KIP-932: below it every
share-group API answers UNSUPPORTED_VERSION, as Kafka 4.2's broker does, `cluster.protocol.handlers.share_version_gate`;
the Python `ShareConsumer`, which calls the actors, is not gated). Every other feature is supported at level 0 only
and not listed, as Kafka 3.9 lists none of the features it supports at 0 only.

A new cluster finalizes `metadata.version`, `transaction.version` 2, `group.version` 1 and `share.version` 1 at its
controller's first start (`bootstrap`, as Kafka 4.2's `kafka-storage format`); a cluster started before keeps its
levels (`kafka-features upgrade --feature group.version=1` turns the consumer protocol on there, `share.version=1`
share groups). A level of 0 is not finalized: a
feature set to 0 leaves the finalized levels, and ApiVersions lists only the levels above 0, as a Kafka broker does.

UpdateFeatures (`update`) checks every update as Kafka's controller does, in order: a known upgrade type, a level not
below 0, a level the cluster supports ("Local controller N does not support this feature." for a feature supporting
0 only, "... only supports versions a-b" otherwise), a lower level only as a downgrade and a higher one only as an
upgrade. The first refusal refuses the whole request (`InvalidUpdateVersionError`, INVALID_UPDATE_VERSION, with Kafka's
message); otherwise every update is written, the same level again included. `validate_only` writes nothing.

Records of the metadata log, one per feature ever updated:

    key    feature/<name>
    value  {"level": n}        (level 0 too: a record, not a tombstone, so the epoch never goes back)

The epoch (ApiVersions' `FinalizedFeaturesEpoch`) is the offset of the newest feature record, as Kafka's is the
metadata offset at which the features last changed: it grows with every update and survives a restart. The store
writes before it changes its memory, so what it answers is on disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from actors.core.security.acl_store import WriteRecord
from storage.errors import InvalidUpdateVersionError

METADATA_VERSION = "metadata.version"
# Kafka's metadata.version level of release 3.9-IV0.
METADATA_VERSION_LEVEL = 21
TRANSACTION_VERSION = "transaction.version"
# Transactions v2 (KIP-890 part 2): what a new cluster finalizes, as Kafka 4's `kafka-storage format` does.
TRANSACTION_VERSION_LEVEL = 2
GROUP_VERSION = "group.version"
# KIP-848's consumer group protocol: the level from which it is served, and what a new cluster finalizes.
GROUP_VERSION_LEVEL = 1
SHARE_VERSION = "share.version"
# KIP-932's share groups: the level from which they are served, and what a new cluster finalizes (Kafka 4.2's).
SHARE_VERSION_LEVEL = 1
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    TRANSACTION_VERSION: (0, TRANSACTION_VERSION_LEVEL),
    GROUP_VERSION: (0, GROUP_VERSION_LEVEL),
    SHARE_VERSION: (0, SHARE_VERSION_LEVEL),
}
# The levels a cluster finalizes at its first start besides `metadata.version` (the highest it supports).
BOOTSTRAP_LEVELS = {
    TRANSACTION_VERSION: TRANSACTION_VERSION_LEVEL,
    GROUP_VERSION: GROUP_VERSION_LEVEL,
    SHARE_VERSION: SHARE_VERSION_LEVEL,
}
FEATURE_KEY_PREFIX = "feature/"
# UpdateFeatures' upgrade types (v1+; v0's allow_downgrade is SAFE_DOWNGRADE or UPGRADE).
UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3
# The epoch ApiVersions answers before any feature is finalized (Kafka's "unknown").
UNKNOWN_EPOCH = -1


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """One feature of an UpdateFeatures request: the level asked for and the upgrade type (`UPGRADE`,
    `SAFE_DOWNGRADE`, `UNSAFE_DOWNGRADE`; any other number is refused)."""

    feature: str
    level: int
    upgrade_type: int = UPGRADE


class FinalizedFeatures:
    """The finalized levels and their epoch; see the module docstring. `supported` is the level range of each
    feature the cluster can run (this broker's, `SUPPORTED_FEATURES`, unless a test gives another). Not thread-safe:
    the controller calls it under its lock."""

    def __init__(self, write: WriteRecord, supported: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES) -> None:
        self._write = write
        self._supported = dict(supported)
        self._levels: dict[str, int] = {}
        self._epoch = UNKNOWN_EPOCH

    def load(self, key: str, value: Mapping[str, object] | None, offset: int) -> None:
        """One record of the metadata log, replayed at start."""
        if value is not None:
            self._apply(key[len(FEATURE_KEY_PREFIX) :], int(str(value["level"])), offset)

    def bootstrap(self) -> None:
        """A cluster's first start (no `metadata.version` finalized yet): `metadata.version` at the highest level
        supported and `BOOTSTRAP_LEVELS`, each capped at what the cluster supports. A cluster started before keeps
        its levels: it moves with UpdateFeatures, as Kafka's."""
        if METADATA_VERSION in self._levels:
            return
        self._persist(METADATA_VERSION, self._supported[METADATA_VERSION][1])
        for feature, level in BOOTSTRAP_LEVELS.items():
            low, high = self._supported.get(feature, (0, 0))
            if high > 0:
                self._persist(feature, max(low, min(level, high)))

    @property
    def epoch(self) -> int:
        return self._epoch

    def levels(self) -> dict[str, int]:
        """Every finalized feature's level (none at 0)."""
        return dict(self._levels)

    def update(self, updates: list[FeatureUpdate], validate_only: bool, controller: str) -> None:
        """Kafka's UpdateFeatures over `updates` (see the module docstring); `controller` names this controller in
        the refusal's message (Kafka's node id)."""
        for update in updates:
            reason = self._refusal(update, controller)
            if reason is not None:
                raise InvalidUpdateVersionError(
                    f"Invalid update version {update.level} for feature {update.feature}. {reason}"
                )
        if validate_only:
            return
        for update in updates:
            self._persist(update.feature, update.level)

    def _refusal(self, update: FeatureUpdate, controller: str) -> str | None:
        if update.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            return "The controller does not support the given upgrade type."
        if update.level < 0:
            return "A feature version cannot be less than 0."
        low, high = self._supported.get(update.feature, (0, 0))
        if not low <= update.level <= high:
            if high == 0:
                return f"Local controller {controller} does not support this feature."
            return f"Local controller {controller} only supports versions {low}-{high}"
        current = self._levels.get(update.feature, 0)
        if update.level < current and update.upgrade_type == UPGRADE:
            return (
                "Can't downgrade the version of this feature without setting the upgrade type to either safe or "
                "unsafe downgrade."
            )
        if update.level > current and update.upgrade_type != UPGRADE:
            return "Can't downgrade to a newer version."
        return None

    def _persist(self, feature: str, level: int) -> None:
        offset = self._write(f"{FEATURE_KEY_PREFIX}{feature}", {"level": level})
        self._apply(feature, level, offset)

    def _apply(self, feature: str, level: int, offset: int) -> None:
        if level == 0:
            self._levels.pop(feature, None)
        else:
            self._levels[feature] = level
        self._epoch = max(self._epoch, offset)
