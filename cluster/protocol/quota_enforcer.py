"""Client quotas as a Kafka listener enforces them: `producer_byte_rate` on Produce, `consumer_byte_rate` on Fetch,
`request_percentage` on every request, `controller_mutation_rate` on CreateTopics, DeleteTopics and CreatePartitions,
`connection_creation_rate` on new connections.

Kafka's `ClientQuotaManager`, per listener (each Kafka broker enforces its own share): every Produce request's size
and every Fetch answer's record bytes are recorded against the sensor of the entity whose quota applies to the
connection's user (its principal's name) and client id (`actors.core.quotas.client_quotas.limit`), over the
broker's `quota.window.num` samples of `quota.window.size.seconds`. A request that takes the rate over the quota gets
the throttle time (`actors.core.quotas.quota_rate`) in its answer's `throttle_time_ms` and mutes its connection for
that long (the server reads no further request of it), as Kafka's `ThrottledChannel` does after sending the answer
(KIP-219); the server handles such a connection's requests one at a time from then on, as Kafka does every
connection's. A throttled Fetch is answered with no partition and its bytes are not counted, as Kafka answers it:
the consumer fetches the same offsets again once unmuted. `request_percentage` counts each request's handling time
on the listener's event loop (`cluster.protocol.request_time`, measured only while such a quota is set; ApiVersions
and the SASL requests are not counted) as a percentage of one thread, Kafka's request quota; its throttle time
replaces the answer's when longer, as Kafka answers the longest of them. Connections no quota applies to record
nothing. Each budget's rate and average throttle time are gauges (`kafka_server_produce_byte_rate`,
`kafka_server_produce_throttle_time`, their `fetch` pair and `kafka_server_request_request_time`,
`kafka_server_request_throttle_time`), as Kafka's quota sensors are metrics.
`controller_mutation_rate` is a token bucket per budget (`actors.core.quotas.controller_mutations`) that the topic
handlers record each topic's partitions on (`mutations`), and mute the connection for the throttle time found
(`mute`). Kafka's controller enforces it for the cluster; here each listener does for the requests it serves, as it
serves them as the cluster's controller.
`connection_creation_rate` (an ip's own, else the default ip's) is measured per address as Kafka's `ConnectionQuotas`
measures it: a connection that takes the address's rate over the quota is not counted, and the server closes it
unread after the throttle time, at most one quota window (`connection_created`).

The quotas are a copy of the controller's: `refresh` reloads them when the controller's quota version moved, which
the listener checks every `REFRESH_INTERVAL_S` and right after this listener altered quotas.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from actors.core.quotas.client_quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Entity,
    limit,
)
from actors.core.quotas.controller_mutations import MutationQuota, TokenBucket
from actors.core.quotas.quota_rate import QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_MS, SampledRate
from actors.metrics.names import (
    FETCH_BYTE_RATE,
    FETCH_THROTTLE_TIME,
    PRODUCE_BYTE_RATE,
    PRODUCE_THROTTLE_TIME,
    REQUEST_THROTTLE_TIME,
    REQUEST_TIME,
)
from actors.metrics.recorder import NO_METRICS, BrokerMetrics, Sample
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.refreshing import refresh_every
from cluster.protocol.views.security_view import SecurityView
from storage.clock import SYSTEM_CLOCK, Clock

REFRESH_INTERVAL_S = 1.0
# Each quota key's gauges: its byte rate and its average throttle time (Kafka's `byte-rate` and `throttle-time` of
# the `Produce` and `Fetch` quota sensors).
_GAUGES = {
    PRODUCER_BYTE_RATE: (PRODUCE_BYTE_RATE, PRODUCE_THROTTLE_TIME),
    CONSUMER_BYTE_RATE: (FETCH_BYTE_RATE, FETCH_THROTTLE_TIME),
    REQUEST_PERCENTAGE: (REQUEST_TIME, REQUEST_THROTTLE_TIME),
}
# A request's handling time as `request_percentage` counts it: percent of one thread for a second (Kafka's
# `nanosToPercentage`).
PERCENT_PER_NANOSECOND = 100 / 1e9


@dataclass(slots=True)
class _Sensors:
    """One budget's sensors: the bytes (or request time) its quota is measured by, and the throttle times it
    earned."""

    samples: int
    window_ms: int
    bytes: SampledRate = field(init=False)
    throttles: SampledRate = field(init=False)

    def __post_init__(self) -> None:
        self.bytes = SampledRate(self.samples, self.window_ms)
        self.throttles = SampledRate(self.samples, self.window_ms)


class QuotaEnforcer:
    """Records Produce and Fetch bytes against the client quotas and answers throttle times; see the module
    docstring."""

    def __init__(
        self,
        view: SecurityView,
        samples: int = QUOTA_WINDOW_NUM,
        window_ms: int = QUOTA_WINDOW_SIZE_MS,
        metrics: BrokerMetrics = NO_METRICS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`samples` and `window_ms`: the broker's `quota.window.num` and `quota.window.size.seconds` (in ms);
        `metrics` gets each budget's byte rate and average throttle time as gauges (`kafka_server_produce_*`,
        `kafka_server_fetch_*`, labelled with the user and client id the quota names, "" for one it does not)."""
        self._view = view
        self._samples = samples
        self._window_ms = window_ms
        self._metrics = metrics
        self._clock = clock
        self._version: int | None = None
        self._quotas: dict[Entity, dict[str, float]] = {}
        self._request_quotas = False
        self._sensors: dict[tuple[str, Entity], _Sensors] = {}
        self._buckets: dict[Entity, TokenBucket] = {}
        self._connection_rates: dict[str, SampledRate] = {}
        metrics.add_gauges(self._gauges)

    def close(self) -> None:
        """Stops reporting the gauges (the listener stops)."""
        self._metrics.remove_gauges(self._gauges)

    def produced(self, context: ConnectionContext, client_id: str | None, size_bytes: int) -> int:
        """Records a Produce request of `size_bytes`; its throttle time in ms (0 if within the quota)."""
        return self._record(PRODUCER_BYTE_RATE, context, client_id, size_bytes)

    def fetched(self, context: ConnectionContext, client_id: str | None, size_bytes: int) -> int:
        """Records a Fetch answer that would carry `size_bytes` of records; its throttle time in ms. A throttled
        answer carries none, so its bytes are taken back (Kafka's `unrecordQuotaSensor`)."""
        return self._record(CONSUMER_BYTE_RATE, context, client_id, size_bytes, keep_throttled=False)

    def mutations(self, context: ConnectionContext, client_id: str | None, strict: bool) -> MutationQuota | None:
        """The `controller_mutation_rate` quota a topic mutation request of this connection records its topics on,
        strict or permissive (see `actors.core.quotas.controller_mutations`); None if no such quota applies."""
        found = limit(self._quotas, CONTROLLER_MUTATION_RATE, context.principal.partition(":")[2], client_id or "")
        if found is None:
            return None
        quota, sharing = found
        bucket = self._buckets.setdefault(sharing, TokenBucket())
        return MutationQuota(bucket, quota, self._samples * self._window_ms / 1000, strict, self._clock)

    def connection_created(self, address: str) -> int:
        """Records a new connection from `address` against its `connection_creation_rate`; the ms to hold it before
        closing it unread if that takes the rate over the quota (the connection is then not counted), else 0."""
        quota = next(
            (
                values[CONNECTION_CREATION_RATE]
                for values in (self._quotas.get(((IP, address),), {}), self._quotas.get(((IP, None),), {}))
                if CONNECTION_CREATION_RATE in values
            ),
            None,
        )
        if quota is None:
            return 0
        rate = self._connection_rates.setdefault(address, SampledRate(self._samples, self._window_ms))
        throttle_ms = rate.record(1, self._clock.milliseconds(), quota)
        if throttle_ms <= 0:
            return 0
        rate.unrecord(1)
        return min(throttle_ms, self._window_ms)

    @staticmethod
    def mute(context: ConnectionContext, throttle_ms: int) -> None:
        """Reads no further request of the connection for `throttle_ms` (Kafka's throttled channel)."""
        context.muted_until = max(context.muted_until, time.monotonic() + throttle_ms / 1000)

    @property
    def limits_request_time(self) -> bool:
        """Whether any `request_percentage` quota is set: only then are requests' handling times measured."""
        return self._request_quotas

    def requested(self, context: ConnectionContext, client_id: str | None, elapsed_ns: int) -> int:
        """Records a request whose handling kept the event loop `elapsed_ns` (`cluster.protocol.request_time`)
        against `request_percentage`; its throttle time in ms."""
        return self._record(REQUEST_PERCENTAGE, context, client_id, elapsed_ns * PERCENT_PER_NANOSECOND)

    def _record(
        self, key: str, context: ConnectionContext, client_id: str | None, size: float, keep_throttled: bool = True
    ) -> int:
        if not self._quotas:
            return 0
        user = context.principal.partition(":")[2]
        found = limit(self._quotas, key, user, client_id or "")
        if found is None:
            return 0
        quota, sharing = found
        context.quota_bound = True
        sensors = self._sensors.get((key, sharing))
        if sensors is None:
            sensors = self._sensors[(key, sharing)] = _Sensors(self._samples, self._window_ms)
        now_ms = self._clock.milliseconds()
        throttle_ms = sensors.bytes.record(size, now_ms, quota)
        if throttle_ms > 0:
            if not keep_throttled:
                sensors.bytes.unrecord(size)
            sensors.throttles.record(throttle_ms, now_ms, math.inf)
            self.mute(context, throttle_ms)
        return throttle_ms

    def _gauges(self) -> list[Sample]:
        """Each budget's byte rate and average throttle time. Read from the metrics exporter's thread."""
        now_ms = self._clock.milliseconds()
        found: list[Sample] = []
        for (key, sharing), sensors in list(self._sensors.items()):
            names = dict(sharing)
            labels = (names.get(USER) or "", names.get(CLIENT_ID) or "")
            rate_spec, throttle_spec = _GAUGES[key]
            found.append((rate_spec, labels, sensors.bytes.rate(now_ms)))
            found.append((throttle_spec, labels, sensors.throttles.average(now_ms)))
        return found

    async def refresh(self) -> None:
        """Reloads the quotas if the controller's copy changed since the last load."""
        if self._version is not None and await self._view.client_quotas_version() == self._version:
            return
        version, quotas = await self._view.client_quotas()
        self._quotas = quotas
        self._request_quotas = any(REQUEST_PERCENTAGE in values for values in quotas.values())
        self._version = version

    async def keep_fresh(self) -> None:
        """Refreshes every `REFRESH_INTERVAL_S` until cancelled; a failed refresh keeps the last copy."""
        await refresh_every(self.refresh, REFRESH_INTERVAL_S, "client quotas")
