"""The finalized features (`actors.core.controller.finalized_features`), plain, no Ray: a new cluster's levels and
epoch, kept across a controller's restart, and UpdateFeatures' rules with Kafka 4.2's messages.

The rules are checked on a store given Kafka 4.2's supported ranges (`KAFKA_4_2_SUPPORTED`, as `kafka-features
describe` prints them on Kafka 4.2), so that every refusal Kafka answers has a case here; the messages are those Kafka
4.2 answered the same UpdateFeatures requests with (`tests/cluster/protocol/test_features.py` compares the two brokers
over the wire)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.core.controller.finalized_features import (
    FEATURE_KEY_PREFIX,
    METADATA_VERSION,
    METADATA_VERSION_LEVEL,
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    FeatureUpdate,
    FinalizedFeatures,
)
from storage.clock import MockClock
from storage.errors import InvalidUpdateVersionError
from tests.actors.core.controller.test_controller import Cluster

KAFKA_4_2_SUPPORTED = {
    METADATA_VERSION: (7, 29),
    "transaction.version": (0, 2),
    "group.version": (0, 1),
    "share.version": (0, 1),
}
DOWNGRADE_REFUSED = (
    "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
)


class RecordLog:
    """The metadata log as the store sees it: each record with its offset."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any] | None]] = []

    def write(self, key: str, value: dict[str, Any] | None) -> int:
        self.records.append((key, value))
        return len(self.records) - 1


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path, MockClock())
    try:
        yield running
    finally:
        running.close()


def kafka_like(levels: dict[str, int]) -> tuple[FinalizedFeatures, RecordLog]:
    """A store with Kafka 4.2's supported ranges, bootstrapped, then at `levels`."""
    log = RecordLog()
    store = FinalizedFeatures(log.write, KAFKA_4_2_SUPPORTED)
    store.bootstrap()
    store.update([FeatureUpdate(name, level) for name, level in levels.items()], validate_only=False, controller="1")
    return store, log


def test_a_new_cluster_finalizes_its_metadata_version_and_a_restart_keeps_levels_and_epoch(cluster: Cluster) -> None:
    epoch, levels = cluster.controller.finalized_features()
    # Kafka 4.2's `kafka-storage format` defaults: transactions v2, the consumer group protocol, share groups.
    assert levels == {
        METADATA_VERSION: METADATA_VERSION_LEVEL,
        "transaction.version": 2,
        "group.version": 1,
        "share.version": 1,
    }
    assert epoch >= 0
    cluster.controller.update_features([FeatureUpdate("transaction.version", 0, SAFE_DOWNGRADE)], False, "0")
    updated = cluster.controller.finalized_features()
    assert updated[0] > epoch
    assert updated[1] == {METADATA_VERSION: METADATA_VERSION_LEVEL, "group.version": 1, "share.version": 1}
    cluster.controller.close()

    cluster.controller = cluster.start_controller()
    assert cluster.controller.finalized_features() == updated


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (FeatureUpdate("nosuch.version", 1), "Local controller 1 does not support this feature."),
        (FeatureUpdate("transaction.version", 7), "Local controller 1 only supports versions 0-2"),
        (FeatureUpdate(METADATA_VERSION, 30), "Local controller 1 only supports versions 7-29"),
        (FeatureUpdate("transaction.version", 2, 5), "The controller does not support the given upgrade type."),
        (FeatureUpdate("transaction.version", -1, SAFE_DOWNGRADE), "A feature version cannot be less than 0."),
        (FeatureUpdate("transaction.version", 1), DOWNGRADE_REFUSED),
        (FeatureUpdate(METADATA_VERSION, 21), DOWNGRADE_REFUSED),
        (FeatureUpdate("share.version", 1, UNSAFE_DOWNGRADE), "Can't downgrade to a newer version."),
    ],
)
def test_a_refused_update_answers_kafkas_message_and_writes_nothing(update: FeatureUpdate, reason: str) -> None:
    store, log = kafka_like({"transaction.version": 2})
    store.update([FeatureUpdate("share.version", 0, SAFE_DOWNGRADE)], False, "1")
    before = (store.epoch, store.levels(), len(log.records))
    # A valid update beside it is not applied either: the request fails as a whole.
    with pytest.raises(InvalidUpdateVersionError) as refused:
        store.update([FeatureUpdate("group.version", 0, SAFE_DOWNGRADE), update], False, "1")
    assert str(refused.value) == f"Invalid update version {update.level} for feature {update.feature}. {reason}"
    assert (store.epoch, store.levels(), len(log.records)) == before


def test_updates_are_written_in_order_and_level_zero_leaves_the_finalized_levels() -> None:
    store, log = kafka_like({"transaction.version": 2, "group.version": 1})
    epoch = store.epoch
    store.update([FeatureUpdate("group.version", 0, SAFE_DOWNGRADE)], validate_only=True, controller="1")
    assert (store.epoch, store.levels()["group.version"]) == (epoch, 1)

    store.update(
        [FeatureUpdate("group.version", 0, SAFE_DOWNGRADE), FeatureUpdate("transaction.version", 2, UPGRADE)],
        validate_only=False,
        controller="1",
    )
    assert store.levels() == {METADATA_VERSION: 29, "transaction.version": 2, "share.version": 1}
    assert store.epoch == len(log.records) - 1 > epoch
    assert log.records[-2:] == [
        (f"{FEATURE_KEY_PREFIX}group.version", {"level": 0}),
        (f"{FEATURE_KEY_PREFIX}transaction.version", {"level": 2}),
    ]

    replayed = FinalizedFeatures(RecordLog().write, KAFKA_4_2_SUPPORTED)
    latest = {key: (offset, value) for offset, (key, value) in enumerate(log.records)}
    for key, (offset, value) in latest.items():
        replayed.load(key, value, offset)
    replayed.bootstrap()
    assert (replayed.epoch, replayed.levels()) == (store.epoch, store.levels())
