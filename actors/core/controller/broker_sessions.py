"""Kafka's broker sessions as the controller keeps them: which registered broker is silent, by the injected clock.

Each registered broker's last heartbeat (or registration) is kept (`beat`); a broker whose last one is older than
`broker.session.timeout.ms` is to be fenced (`silent`), as Kafka's controller fences a broker whose session expired,
whatever its host says (a paused process's node may stay alive to Ray for a long time: Ray's default health checks
take a minute to fail while writes wait for it). Two exceptions: after a gap of half a session between two monitor
passes every session starts again (the controller itself was paused or starved and cannot tell who was silent), and
the last broker with a session is never fenced (no other could take over its partitions; they would only go
offline). Brokers the partitions' states name but that never registered are taken for lost once, a session after the
controller started (`absent_check_due`): their node was lost while no controller ran.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from storage.clock import Clock


class BrokerSessions:
    """The sessions of the registered brokers; see the module docstring. Callers serialise the calls."""

    def __init__(self, clock: Clock, session_ms: int, brokers: Iterable[str]) -> None:
        self._clock = clock
        self._session_ms = session_ms
        now_ms = clock.milliseconds()
        self._beats = dict.fromkeys(brokers, now_ms)
        self._last_check_ms = now_ms
        self._absent_check_ms: int | None = now_ms + session_ms

    def beat(self, node: str) -> None:
        """A heartbeat (or a registration) of `node`'s broker: its session starts again."""
        self._beats[node] = self._clock.milliseconds()

    def forget(self, node: str) -> None:
        self._beats.pop(node, None)

    def silent(self, registered: Collection[str]) -> list[str]:
        """The brokers to fence now, in node order (see the module docstring)."""
        now_ms = self._clock.milliseconds()
        if now_ms - self._last_check_ms > self._session_ms // 2:
            self._beats = dict.fromkeys(registered, now_ms)
        self._last_check_ms = now_ms
        silent = sorted(node for node, beat in self._beats.items() if now_ms - beat > self._session_ms)
        return silent[1:] if len(silent) >= len(registered) else silent

    @property
    def absent_check_pending(self) -> bool:
        """True until `absent_check_due` said it was time: unregistered brokers may still be named in ISRs."""
        return self._absent_check_ms is not None

    def absent_check_due(self) -> bool:
        """True once, a session after the controller started: time to take unregistered brokers for lost."""
        if self._absent_check_ms is None or self._clock.milliseconds() < self._absent_check_ms:
            return False
        self._absent_check_ms = None
        return True
