"""Where the Ray head's GCS keeps the cluster's state, so that a head that dies and is started again resumes the
same Ray cluster rather than a new one (Ray's GCS fault tolerance).

Without it the GCS holds everything in memory: when the head dies, the worker nodes' raylets give up on it after
`RAY_gcs_rpc_server_reconnect_timeout_s` (Ray's default 60 s) or are turned away by the new head as unknown, and
every actor on them, every partition, goes with them. With it, the head started again on the same port and
storage reloads the actors, nodes and named handles, and the workers reconnect; their actors never stop
answering the callers that hold them.

Two backends, as Ray 2.60 has them:

- `rocksdb` (`raybroker start`'s default): Ray's embedded RocksDB store (`RAY_gcs_storage=rocksdb`) in a folder
  on the head's disk (`RAY_gcs_storage_path`), by default beside the metadata log dir (`<first log dir>-ray-gcs`).
  On Kubernetes, a persistent volume. Ray documents this backend as alpha.
- `redis`: an external Redis at HOST:PORT (`RAY_REDIS_ADDRESS`), Ray's officially supported backend, for heads
  whose disk does not survive them.

`memory` turns it off (Ray's default). Every node started with `ray start --address` should wait longer for its
head than Ray's default minute: `WORKER_ENVIRONMENT` (KubeRay raises the same setting when GCS FT is on). A clean
`raybroker stop` ends the cluster, so it discards the RocksDB folder (`discard`): the next `start` begins a new Ray
cluster rather than reloading the actors of the stopped one.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from storage.config.broker_config import BrokerConfig
from storage.errors import InvalidConfigError

BACKENDS = ("rocksdb", "redis", "memory")
# How long a node's raylet waits for a head that went away before it exits (Ray's default is 60 s): long enough
# for the head's machine or pod to come back.
RECONNECT_TIMEOUT_S = 600
WORKER_ENVIRONMENT = {"RAY_gcs_rpc_server_reconnect_timeout_s": str(RECONNECT_TIMEOUT_S)}


@dataclass(frozen=True, slots=True)
class GcsStorage:
    """One backend of the head's GCS and where it keeps its state (a folder for rocksdb, HOST:PORT for redis)."""

    backend: str
    location: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise InvalidConfigError(f"GCS storage is one of {', '.join(BACKENDS)}, not {self.backend!r}")
        if self.backend != "memory" and not self.location:
            raise InvalidConfigError(f"GCS storage {self.backend} needs a location")

    @classmethod
    def rocksdb(cls, folder: Path) -> GcsStorage:
        return cls("rocksdb", str(folder.expanduser().absolute()))

    @classmethod
    def redis(cls, address: str) -> GcsStorage:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidConfigError(f"a Redis address is HOST:PORT, not {address!r}")
        return cls("redis", address)

    def head_environment(self) -> dict[str, str]:
        """The variables `ray start --head` is run with."""
        if self.backend == "rocksdb":
            return {"RAY_gcs_storage": "rocksdb", "RAY_gcs_storage_path": self.location, **WORKER_ENVIRONMENT}
        if self.backend == "redis":
            return {"RAY_REDIS_ADDRESS": self.location, **WORKER_ENVIRONMENT}
        return {}

    def resumes(self) -> bool:
        """Whether a head started on this storage reloads an earlier cluster (a RocksDB folder that recorded a Ray
        session; what Redis holds is not looked into)."""
        return self.backend == "rocksdb" and (Path(self.location) / "session_name").is_file()

    def discard(self) -> None:
        """Forgets the stopped cluster's state (the RocksDB folder; a Redis is left to its owner)."""
        if self.backend == "rocksdb":
            shutil.rmtree(self.location, ignore_errors=True)

    def describe(self) -> str:
        if self.backend == "rocksdb":
            return f"RocksDB in {self.location}"
        if self.backend == "redis":
            return f"Redis at {self.location}"
        return "memory only (a lost head loses the cluster)"


def default_storage(config: BrokerConfig) -> GcsStorage:
    """RocksDB beside the metadata log dir (the first of `log.dirs`): `<dir>-ray-gcs`."""
    metadata_dir = Path(config.log_dirs[0])
    return GcsStorage.rocksdb(metadata_dir.with_name(f"{metadata_dir.name}-ray-gcs"))
