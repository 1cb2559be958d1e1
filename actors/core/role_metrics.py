"""What the plain roles of `actors.core` report to the broker's metrics: the seam they take, Ray-free.

`RoleMetrics` holds the events these roles see: a leader's append (`produced`, once per batch), an ISR change the
controller persists (`isr_changed`), a share consumer's acknowledgements applied (`share_acknowledged`, once per call,
the records counted by type) and the bytes a reassignment's new replica fetched and its leader sent
(`reassignment_bytes_in`, `reassignment_bytes_out`, once per replica fetch). It is the part of
`actors.metrics.recorder.BrokerMetrics` that this package calls: the Ray actors and the in-process broker hand in the
process's `MetricsRecorder`, which records them under Kafka's names; a role given none takes `NO_ROLE_METRICS`, which
records nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class RoleMetrics(Protocol):
    """The events of the plain roles (see the module docstring)."""

    def produced(self, topic: str, records: int, size_bytes: int) -> None:
        """A leader appended `records` client records in `size_bytes` of batches to a partition of `topic`."""

    def isr_changed(self, before: int, after: int) -> None:
        """A partition's ISR went from `before` to `after` replicas."""

    def share_acknowledged(self, records_by_type: Mapping[str, int]) -> None:
        """A share consumer's acknowledgements were applied: the records of each type (Kafka's `ackType`: Accept,
        Release, Reject)."""

    def reassignment_bytes_in(self, size_bytes: int) -> None:
        """A replica being added by a reassignment appended `size_bytes` fetched from its leader."""

    def reassignment_bytes_out(self, size_bytes: int) -> None:
        """A leader answered `size_bytes` to the fetch of a replica being added by a reassignment."""


class NoRoleMetrics:
    """Records nothing."""

    def produced(self, topic: str, records: int, size_bytes: int) -> None:
        pass

    def isr_changed(self, before: int, after: int) -> None:
        pass

    def share_acknowledged(self, records_by_type: Mapping[str, int]) -> None:
        pass

    def reassignment_bytes_in(self, size_bytes: int) -> None:
        pass

    def reassignment_bytes_out(self, size_bytes: int) -> None:
        pass


NO_ROLE_METRICS = NoRoleMetrics()
