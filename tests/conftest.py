"""Fixtures shared by every test package: where the golden files live."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
# The repo is checked out next to `shared/` (locally /work/main beside /work/shared; CI clones it the same way).
KAFKA_SAMPLES_DIR = TESTS_DIR.parents[1] / "shared" / "kafka-samples"


@pytest.fixture(scope="session")
def kafka_samples_dir() -> Path:
    """Log dirs written by a real Kafka broker (see its PROVENANCE.md); skips when `shared/` is not beside the repo."""
    if not KAFKA_SAMPLES_DIR.is_dir():
        pytest.skip(f"Kafka sample log dirs not found at {KAFKA_SAMPLES_DIR}")
    return KAFKA_SAMPLES_DIR


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """Golden files committed with the tests (`tests/fixtures/`)."""
    return TESTS_DIR / "fixtures"
