"""`cluster.gcs_storage`: the variables a head is started with for each GCS backend, where RocksDB goes by
default, and what a clean stop discards. Without Ray: Ray's own reading of these variables is
`tests/cluster/test_head_restart.py`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.gcs_storage import RECONNECT_TIMEOUT_S, GcsStorage, default_storage
from storage.config.broker_config import BrokerConfig
from storage.errors import InvalidConfigError

RECONNECT = {"RAY_gcs_rpc_server_reconnect_timeout_s": str(RECONNECT_TIMEOUT_S)}


def test_rocksdb_names_ray_s_embedded_store_and_its_folder(tmp_path: Path) -> None:
    storage = GcsStorage.rocksdb(tmp_path / "gcs")
    assert storage.head_environment() == {
        "RAY_gcs_storage": "rocksdb",
        "RAY_gcs_storage_path": str(tmp_path / "gcs"),
        **RECONNECT,
    }
    assert storage.describe() == f"RocksDB in {tmp_path / 'gcs'}"


def test_a_relative_folder_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert GcsStorage.rocksdb(Path("gcs")).location == str(tmp_path / "gcs")


def test_redis_names_its_address_and_refuses_one_without_a_port() -> None:
    assert GcsStorage.redis("redis.internal:6379").head_environment() == {
        "RAY_REDIS_ADDRESS": "redis.internal:6379",
        **RECONNECT,
    }
    for address in ("redis.internal", ":6379", "redis.internal:port"):
        with pytest.raises(InvalidConfigError, match="HOST:PORT"):
            GcsStorage.redis(address)


def test_memory_sets_nothing_and_says_what_a_lost_head_costs() -> None:
    storage = GcsStorage("memory")
    assert storage.head_environment() == {}
    assert "a lost head loses the cluster" in storage.describe()


def test_unknown_backends_and_missing_locations_are_refused() -> None:
    with pytest.raises(InvalidConfigError, match="one of rocksdb, redis, memory"):
        GcsStorage("etcd", "x")
    with pytest.raises(InvalidConfigError, match="needs a location"):
        GcsStorage("rocksdb")


def test_the_default_is_rocksdb_beside_the_first_log_dir(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties({"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"})
    assert default_storage(config) == GcsStorage.rocksdb(tmp_path / "a-ray-gcs")


def test_a_folder_resumes_once_ray_recorded_a_session_in_it(tmp_path: Path) -> None:
    storage = GcsStorage.rocksdb(tmp_path / "gcs")
    assert not storage.resumes()
    (tmp_path / "gcs").mkdir()
    assert not storage.resumes()
    (tmp_path / "gcs" / "session_name").write_text("session_2026-11-26_04-27-12_075191_6374", encoding="utf-8")
    assert storage.resumes()
    assert not GcsStorage.redis("redis:6379").resumes(), "what a Redis holds is not looked into"


def test_discard_removes_the_rocksdb_folder_only(tmp_path: Path) -> None:
    folder = tmp_path / "gcs"
    (folder / "db").mkdir(parents=True)
    (folder / "db" / "CURRENT").write_text("MANIFEST-000001\n", encoding="utf-8")
    GcsStorage.rocksdb(folder).discard()
    assert not folder.exists()
    GcsStorage.rocksdb(folder).discard()
    GcsStorage.redis("redis:6379").discard()
    GcsStorage("memory").discard()
