"""The `controller_mutation_rate` quota's token bucket and per-request quotas (`actors.core.quotas.
controller_mutations`), plain, by a mock clock, against Kafka's rules read in its `TokenBucket` and
`ControllerMutationQuotaManager`: a bucket starts full at quota x samples x window, refills at the quota, and may go
below zero; a strict request is refused once it is below zero, a permissive one never; the throttle time is the
refill time back to zero, less the time since it was found. Kafka 4.2 is compared over the wire in
`tests/cluster/protocol/test_client_quotas.py`."""

from __future__ import annotations

import pytest

from actors.core.quotas.controller_mutations import (
    THROTTLED_MESSAGE,
    MutationQuota,
    ThrottlingQuotaExceededError,
    TokenBucket,
)
from storage.clock import MockClock

QUOTA = 2.0
# Kafka's defaults: quota.window.num 11 windows of quota.window.size.seconds 1.
BURST_S = 11.0


def quota(bucket: TokenBucket, clock: MockClock, strict: bool) -> MutationQuota:
    return MutationQuota(bucket, QUOTA, BURST_S, strict, clock)


@pytest.fixture
def clock() -> MockClock:
    running = MockClock()
    running.sleep(1000)
    return running


def test_a_strict_quota_passes_whatever_a_bucket_at_zero_or_above_is_asked_then_refuses(clock: MockClock) -> None:
    bucket = TokenBucket()
    assert bucket.tokens(QUOTA, BURST_S, clock.milliseconds()) == QUOTA * BURST_S
    request = quota(bucket, clock, strict=True)
    request.record(22)
    request.record(30)
    assert request.throttle_time_ms() == 0
    with pytest.raises(ThrottlingQuotaExceededError) as refused:
        request.record(1)
    assert (refused.value.throttle_ms, str(refused.value)) == (15_000, THROTTLED_MESSAGE)
    assert request.throttle_time_ms() == 15_000
    clock.sleep(4_000)
    assert request.throttle_time_ms() == 11_000
    # The refused topic took nothing: the bucket refills from -30.
    assert bucket.tokens(QUOTA, BURST_S, clock.milliseconds()) == -22
    clock.sleep(11_000)
    quota(bucket, clock, strict=True).record(1)


def test_a_permissive_quota_carries_out_every_mutation_and_reports_the_throttle(clock: MockClock) -> None:
    bucket = TokenBucket()
    request = quota(bucket, clock, strict=False)
    request.record(20)
    assert request.throttle_time_ms() == 0
    request.record(5)
    assert request.throttle_time_ms() == 1_500
    request.record(5)
    assert request.throttle_time_ms() == 4_000


def test_the_bucket_refills_at_the_quota_up_to_the_burst(clock: MockClock) -> None:
    bucket = TokenBucket()
    bucket.take(22, QUOTA, BURST_S, clock.milliseconds())
    clock.sleep(2_500)
    assert bucket.tokens(QUOTA, BURST_S, clock.milliseconds()) == 5
    clock.sleep(60_000)
    assert bucket.tokens(QUOTA, BURST_S, clock.milliseconds()) == 22
    # A quota changed later applies to the tokens left, with its own burst.
    assert bucket.tokens(1.0, BURST_S, clock.milliseconds()) == 11
