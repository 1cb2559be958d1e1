"""`cluster.spark.segment_jar` without the tools to build the JVM reader: no jar, the reason said once in the
log, so that `read_topics` reads in Python workers (the Spark tests read through the jar when it is there)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cluster.spark import segment_jar


def test_without_maven_there_is_no_jar_and_the_log_says_why_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("RAYBROKER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.setattr(segment_jar, "_warned", set())
    with caplog.at_level(logging.WARNING, logger=segment_jar.__name__):
        assert segment_jar.segment_jar() is None
        assert segment_jar.segment_jar() is None
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 1
    assert "is not installed" in said[0]
    assert not (tmp_path / "cache").exists()


def test_the_jar_name_changes_with_the_source_and_with_pysparks_jars(tmp_path: Path) -> None:
    jars = segment_jar.pyspark_jars()
    before = segment_jar.source_hash(jars)
    assert segment_jar.source_hash(jars) == before
    other = {**jars, "spark-sql": tmp_path / "spark-sql_2.12-9.9.9.jar"}
    assert segment_jar.source_hash(other) != before
