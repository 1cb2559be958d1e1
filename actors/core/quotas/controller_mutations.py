"""The `controller_mutation_rate` quota (KIP-599, Kafka's `ControllerMutationQuotaManager`): partitions created
(CreateTopics, CreatePartitions) or deleted (DeleteTopics) per second, per user and client id.

Kafka measures it with a token bucket (`TokenBucket`) rather than the sampled rate of the byte quotas: the bucket
holds up to `quota.window.num` x `quota.window.size.seconds` x the quota tokens (the burst), starts full, refills at
the quota per second, and each mutation takes one token per partition; it may go below zero, and while it is below,
the throttle time is how long the refill takes to bring it back to zero.

Each request gets a `MutationQuota` that each topic records its partitions on, after the topic passed every other
check and before it changes anything, as Kafka's controller does:
- strict (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+, clients that back off themselves): a topic is
  refused with `ThrottlingQuotaExceededError` (THROTTLING_QUOTA_EXCEEDED) if the bucket is already below zero when
  it asks; otherwise its partitions are taken, however many, so one large creation passes on a full bucket;
- permissive (older versions): every topic is carried out and its partitions taken; the answer is only throttled.
The request's throttle time (`throttle_time_ms`) is the last one found, less the time since.
"""

from __future__ import annotations

from storage.clock import Clock
from storage.errors import RaybrokerError

THROTTLED_MESSAGE = "The throttling quota has been exceeded."


class ThrottlingQuotaExceededError(RaybrokerError):
    """A topic mutation refused under a strict `controller_mutation_rate` quota (THROTTLING_QUOTA_EXCEEDED); asked
    again after its throttle time, it may pass (Kafka's exception is retriable)."""

    retriable = True

    def __init__(self, throttle_ms: int) -> None:
        super().__init__(THROTTLED_MESSAGE)
        self.throttle_ms = throttle_ms


class TokenBucket:
    """Kafka's `TokenBucket` stat for one quota entity; see the module docstring. `quota` and `burst_s` (the samples
    times the window, in seconds) are given at each call, as Kafka reads them from the metric's config, so a quota
    changed later applies to the tokens left."""

    def __init__(self) -> None:
        self._tokens = 0.0
        self._last_ms = 0

    def tokens(self, quota: float, burst_s: float, now_ms: int) -> float:
        """The tokens left now (refilled since the last call)."""
        self._refill(quota, burst_s, now_ms)
        return self._tokens

    def take(self, value: float, quota: float, burst_s: float, now_ms: int) -> None:
        """Takes `value` tokens (Kafka's `record`)."""
        self._refill(quota, burst_s, now_ms)
        self._tokens = min(quota * burst_s, self._tokens - value)

    def _refill(self, quota: float, burst_s: float, now_ms: int) -> None:
        self._tokens = min(quota * burst_s, self._tokens + quota * (now_ms - self._last_ms) / 1000)
        self._last_ms = now_ms


def throttle_ms(tokens: float, quota: float) -> int:
    """How long a bucket at `tokens` (below zero) takes to refill to zero at `quota` a second (Kafka's
    `ControllerMutationQuotaManager.throttleTimeMs`)."""
    return round(-tokens / quota * 1000)


class MutationQuota:
    """One request's view of its entity's bucket (Kafka's Strict- and PermissiveControllerMutationQuota)."""

    def __init__(self, bucket: TokenBucket, quota: float, burst_s: float, strict: bool, clock: Clock) -> None:
        self._bucket = bucket
        self._quota = quota
        self._burst_s = burst_s
        self._strict = strict
        self._clock = clock
        self._throttle_ms = 0
        self._found_at_ms = 0

    def record(self, partitions: int) -> None:
        """Takes `partitions` tokens for one topic; strict, first refuses it if the bucket is below zero."""
        now_ms = self._clock.milliseconds()
        if self._strict:
            tokens = self._bucket.tokens(self._quota, self._burst_s, now_ms)
            if tokens < 0:
                self._found(tokens, now_ms)
                raise ThrottlingQuotaExceededError(self._throttle_ms)
        self._bucket.take(partitions, self._quota, self._burst_s, now_ms)
        if not self._strict:
            tokens = self._bucket.tokens(self._quota, self._burst_s, now_ms)
            if tokens < 0:
                self._found(tokens, now_ms)

    def throttle_time_ms(self) -> int:
        """The throttle time the answer carries: the last found, less the time since."""
        return max(0, self._throttle_ms - (self._clock.milliseconds() - self._found_at_ms))

    def _found(self, tokens: float, now_ms: int) -> None:
        self._throttle_ms = throttle_ms(tokens, self._quota)
        self._found_at_ms = now_ms
