"""The controller's client quota store and the quota sensors (`actors/core/quotas/`) without Ray: Kafka's
validation messages (those of `ClientQuotaControlManager`), alterations applied entity by entity, Describe's
filters (`ClientQuotasImage.describe`), a replayed store that answers the same, Kafka's order of precedence, and a
sensor's rate and throttle time against a model of Kafka's `Rate`."""

from __future__ import annotations

import math
import random

import pytest

from actors.core.quotas.client_quotas import (
    CLIENT_ID,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    ClientQuotaStore,
    FilterComponent,
    QuotaAlteration,
    UnknownEntityTypeError,
    limit,
)
from actors.core.quotas.quota_rate import SampledRate
from storage.errors import InvalidRequestError
from tests.actors.core.security.metadata_log import MetadataLog


def alteration(entity: dict[str, str | None], **ops: float | None) -> QuotaAlteration:
    return QuotaAlteration(tuple(entity.items()), tuple(ops.items()))


def replayed(log: MetadataLog) -> ClientQuotaStore:
    store = ClientQuotaStore(log.write)
    for key, (offset, value) in log.latest("quota/").items():
        store.load(key, value, offset)
    return store


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ({}, {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
        ({"group": "g"}, {"producer_byte_rate": 1.0}, "Unhandled client quota entity type: group"),
        ({USER: ""}, {"producer_byte_rate": 1.0}, "Empty user not supported"),
        (
            {USER: "a", "ip": None},
            {"producer_byte_rate": 1.0},
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        ),
        ({USER: "a"}, {"bogus_rate": 1.0}, "Invalid configuration key bogus_rate"),
        ({USER: "a"}, {"connection_creation_rate": 1.0}, "Invalid configuration key connection_creation_rate"),
        ({"ip": None}, {"producer_byte_rate": 1.0}, "Invalid configuration key producer_byte_rate"),
        ({USER: "a"}, {"producer_byte_rate": 0.0}, "Quota producer_byte_rate must be greater than 0"),
        ({USER: "a"}, {"consumer_byte_rate": -5.0}, "Quota consumer_byte_rate must be greater than 0"),
        ({USER: "a"}, {"producer_byte_rate": 10.5}, "producer_byte_rate cannot be a fractional value."),
        ({USER: "a"}, {"producer_byte_rate": 2.0**64}, "Proposed value for producer_byte_rate is too large for a LONG"),
        ({"ip": "10.0.0.1"}, {"connection_creation_rate": 2.0**32}, "too large for an INT."),
    ],
)
def test_invalid_alterations_answer_kafkas_message_and_change_nothing(
    entity: dict[str, str | None], ops: dict[str, float], message: str
) -> None:
    log = MetadataLog()
    store = ClientQuotaStore(log.write)
    [answer] = store.alter([alteration(entity, **ops)])
    assert answer is not None and message in answer
    assert store.quotas() == {} and log.records == []


def test_an_entity_twice_in_one_request_is_refused_both_times_and_the_others_apply() -> None:
    store = ClientQuotaStore(MetadataLog().write)
    answers = store.alter(
        [
            alteration({USER: "a"}, producer_byte_rate=1000.0),
            alteration({CLIENT_ID: "c"}, consumer_byte_rate=2000.0),
            alteration({USER: "a"}, producer_byte_rate=3000.0),
            alteration({CLIENT_ID: "d"}, request_percentage=12.5, consumer_byte_rate=None),
        ]
    )
    assert answers[0] is not None and answers[0].startswith("Ignoring duplicate entity")
    assert answers[2] == answers[0] and answers[1] is None and answers[3] is None
    assert store.quotas() == {
        ((CLIENT_ID, "c"),): {"consumer_byte_rate": 2000.0},
        ((CLIENT_ID, "d"),): {"request_percentage": 12.5},
    }


def test_a_key_twice_in_one_alteration_is_refused() -> None:
    store = ClientQuotaStore(MetadataLog().write)
    entity = ((USER, "a"),)
    [answer] = store.alter([QuotaAlteration(entity, (("producer_byte_rate", 1.0), ("producer_byte_rate", None)))])
    assert answer is not None and answer.startswith("Duplicate quota key producer_byte_rate")
    assert store.quotas() == {}


def test_set_change_remove_validate_only_and_replay() -> None:
    log = MetadataLog()
    store = ClientQuotaStore(log.write)
    both = {USER: "alice", CLIENT_ID: None}
    assert store.alter([alteration(both, producer_byte_rate=1024.0, consumer_byte_rate=2048.0)]) == [None]
    assert store.alter([alteration({USER: None}, request_percentage=50.0)], validate_only=True) == [None]
    written = len(log.records)
    assert store.alter([alteration(both, producer_byte_rate=1024.0)]) == [None]
    assert len(log.records) == written, "an unchanged value writes no record"
    version = store.version
    assert store.alter([alteration(both, consumer_byte_rate=None, producer_byte_rate=4096.0)]) == [None]
    assert store.version > version
    assert store.quotas() == {((CLIENT_ID, None), (USER, "alice")): {"producer_byte_rate": 4096.0}}
    assert replayed(log).quotas() == store.quotas()
    assert store.alter([alteration(both, producer_byte_rate=None)]) == [None]
    assert store.quotas() == {} and replayed(log).quotas() == {}
    assert replayed(log).version == store.version


def test_describe_filters_as_kafka() -> None:
    store = ClientQuotaStore(MetadataLog().write)
    entities: list[dict[str, str | None]] = [
        {USER: "alice"},
        {USER: "alice", CLIENT_ID: "app"},
        {USER: None},
        {USER: None, CLIENT_ID: None},
        {CLIENT_ID: "app"},
        {CLIENT_ID: None},
        {"ip": "10.0.0.1"},
    ]
    for index, entity in enumerate(entities):
        key = "connection_creation_rate" if "ip" in entity else "producer_byte_rate"
        assert store.alter([alteration(entity, **{key: float(index + 1)})]) == [None]

    def described(strict: bool, *components: tuple[str, int, str | None]) -> list[dict[str, str | None]]:
        found = store.describe([FilterComponent(*component) for component in components], strict)
        return [dict(entity) for entity, _ in found]

    assert described(False, (USER, MATCH_EXACT, "alice")) == [{USER: "alice"}, {USER: "alice", CLIENT_ID: "app"}]
    assert described(True, (USER, MATCH_EXACT, "alice")) == [{USER: "alice"}]
    assert described(True, (USER, MATCH_DEFAULT, None)) == [{USER: None}]
    assert described(False, (CLIENT_ID, MATCH_SPECIFIED, None)) == [
        {USER: "alice", CLIENT_ID: "app"},
        {USER: None, CLIENT_ID: None},
        {CLIENT_ID: "app"},
        {CLIENT_ID: None},
    ]
    assert described(True, (USER, MATCH_SPECIFIED, None), (CLIENT_ID, MATCH_DEFAULT, None)) == [
        {USER: None, CLIENT_ID: None}
    ]
    assert len(described(False)) == len(entities)
    assert described(True) == []
    for components, error in [
        ([("", MATCH_EXACT, "a")], "Invalid empty entity type."),
        ([(USER, MATCH_EXACT, "a"), (USER, MATCH_DEFAULT, None)], "cannot appear more than once"),
        ([(USER, MATCH_EXACT, None)], "MATCH_TYPE_EXACT, but set match string to null"),
        ([(USER, MATCH_DEFAULT, "a")], "MATCH_TYPE_DEFAULT, but also specified a match string"),
        ([(USER, MATCH_SPECIFIED, "a")], "MATCH_TYPE_SPECIFIED, but also specified a match string"),
        ([(USER, 7, None)], "Unknown match type 7"),
        ([("ip", MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)], "IP filter component should not be used"),
    ]:
        with pytest.raises(InvalidRequestError, match=error):
            store.describe([FilterComponent(*component) for component in components], False)
    with pytest.raises(UnknownEntityTypeError, match="Unsupported entity type group"):
        store.describe([FilterComponent("group", MATCH_SPECIFIED, None)], False)


def test_precedence_is_kafkas_and_the_matched_entity_names_who_shares_the_budget() -> None:
    levels: list[dict[str, str | None]] = [
        {USER: "u", CLIENT_ID: "c"},
        {USER: "u", CLIENT_ID: None},
        {USER: "u"},
        {USER: None, CLIENT_ID: "c"},
        {USER: None, CLIENT_ID: None},
        {USER: None},
        {CLIENT_ID: "c"},
        {CLIENT_ID: None},
    ]
    store = ClientQuotaStore(MetadataLog().write)
    for rank, entity in enumerate(levels):
        store.alter([alteration(entity, producer_byte_rate=float(rank + 1))])
    for rank, entity in enumerate(levels):
        found = limit(store.quotas(), "producer_byte_rate", "u", "c")
        assert found is not None and found[0] == float(rank + 1)
        assert dict(found[1]) == {kind: ("u" if kind == USER else "c") for kind in entity}
        store.alter([alteration(entity, producer_byte_rate=None)])
    assert limit(store.quotas(), "producer_byte_rate", "u", "c") is None


def model_throttle(records: list[tuple[int, float]], quota: float, samples: int = 11, window_ms: int = 1000) -> int:
    """Kafka's `Rate` over `WindowedSum`, straight from its definition: the throttle time of the last record."""
    starts: list[list[float]] = []  # [start_ms, total]
    for now, value in records:
        starts = [sample for sample in starts if now - sample[0] < samples * window_ms]
        if not starts or now - starts[-1][0] >= window_ms:
            starts.append([now, 0.0])
            starts = starts[-samples:]
        starts[-1][1] += value
    now = records[-1][0]
    elapsed = now - starts[0][0]
    full = elapsed // window_ms
    if full < samples - 1:
        elapsed += (samples - 1 - full) * window_ms
    elapsed = max(elapsed, 1)
    rate = sum(total for _, total in starts) * 1000 / elapsed
    return 0 if rate <= quota else round((rate - quota) / quota * elapsed)


def test_sampled_rate_matches_the_model_of_kafkas_rate() -> None:
    rng = random.Random(11)
    for _ in range(50):
        sensor = SampledRate()
        records: list[tuple[int, float]] = []
        now = 0
        quota = rng.choice([1000.0, 50_000.0, 1_048_576.0])
        for _ in range(rng.randint(1, 200)):
            now += rng.choice([0, 1, 10, 250, 999, 1000, 3000, 12_000])
            value = rng.choice([100.0, 16_384.0, 1_048_576.0])
            records.append((now, value))
            assert sensor.record(value, now, quota) == model_throttle(records, quota)


def test_a_first_burst_is_measured_over_ten_windows() -> None:
    """10 MiB at once is within 1 MiB/s (ten windows counted); 1 MiB more 1 ms later is over it, and the throttle
    is what brings 11 MiB over the window back to 1 MiB/s: (11 MiB / quota) s minus the 10.001 s window."""
    sensor = SampledRate()
    assert sensor.record(10 * 1_048_576, 0, 1_048_576) == 0
    assert sensor.record(1_048_576, 1, 1_048_576) == 11_000 - 10_001


def test_rate_and_average_read_the_window_and_forget_what_left_it() -> None:
    sensor = SampledRate()
    assert sensor.record(1000, 0, math.inf) == 0
    assert sensor.record(3000, 500, math.inf) == 0
    assert sensor.rate(500) == pytest.approx(4000 * 1000 / 10_500)
    assert sensor.average(500) == 2000
    assert sensor.rate(10_999) == pytest.approx(4000 * 1000 / 10_999)
    assert (sensor.rate(11_000), sensor.average(11_000)) == (0.0, 0.0)
