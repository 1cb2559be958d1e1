"""Benchmark clients in processes of their own (spawned), so a client's Python never competes for the GIL with
the broker, the listener or the other client it is measured against.

`spawn(target, *args)` starts `target(*args)` in a new process; `.result()` waits for what it returned (its error
as a `RuntimeError` naming it) and reaps the process; `.stop()` reaps it whatever happened (joined, killed after
10 s). `in_process(target, *args)` is both in one call.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

# How long a client may take to report before it counts as hung.
CLIENT_TIMEOUT_S = 300.0
# librdkafka's own logging off: only the benchmark's lines reach the terminal.
QUIET = {"log_level": 0}
_JOIN_TIMEOUT_S = 10


class SpawnedClient:
    """`target(*args)` running in a spawned process (see the module docstring)."""

    def __init__(self, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
        context = multiprocessing.get_context("spawn")
        self._name = getattr(target, "__name__", "benchmark client")
        self._results = context.Queue()
        self._process = context.Process(target=_call, args=(target, args, self._results))
        self._process.start()

    def result(self, timeout_s: float = CLIENT_TIMEOUT_S) -> Any:
        """What the target returned; `RuntimeError` with its error if it raised. Reaps the process."""
        try:
            ok, value = self._results.get(timeout=timeout_s)
        finally:
            self.stop()
        if not ok:
            raise RuntimeError(f"benchmark client {self._name} failed: {value}")
        return value

    def stop(self) -> None:
        """Waits for the process to end, killing it after a while; safe to call again."""
        self._process.join(timeout=_JOIN_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def spawn(target: Callable[..., Any], *args: Any) -> SpawnedClient:
    return SpawnedClient(target, args)


def in_process(target: Callable[..., Any], *args: Any) -> Any:
    """`target(*args)` run in a spawned process; what it returned."""
    return spawn(target, *args).result()


def _call(target: Callable[..., Any], args: tuple[Any, ...], results: Any) -> None:
    try:
        results.put((True, target(*args)))
    except BaseException as exc:
        results.put((False, f"{type(exc).__name__}: {exc}"))
