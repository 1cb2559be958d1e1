"""A stand-in for the controller's metadata log in the store tests: records appended as the controller writes them
(JSON values, through `json` both ways), and replayed as it replays them (the latest record per key)."""

from __future__ import annotations

import json
from typing import Any


class MetadataLog:
    """Appended (key, JSON text or None) records; `latest()` is what a restarted controller replays."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str | None]] = []

    def write(self, key: str, value: dict[str, Any] | None) -> int:
        self.records.append((key, None if value is None else json.dumps(value, sort_keys=True)))
        return len(self.records) - 1

    def latest(self, prefix: str) -> dict[str, tuple[int, dict[str, Any] | None]]:
        """key -> (offset, value) of the latest record of every key that starts with `prefix`."""
        found: dict[str, tuple[int, dict[str, Any] | None]] = {}
        for offset, (key, text) in enumerate(self.records):
            if key.startswith(prefix):
                found[key] = (offset, None if text is None else json.loads(text))
        return found
