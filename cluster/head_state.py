"""The state file of `raybroker start`: which local Ray head it started, so that `stop` stops that one only.

`<tempdir>/raybroker-<uid>/cli-state.json`, written atomically (a temporary file, then `os.replace`):

| key            | what                                                                        |
|----------------|-----------------------------------------------------------------------------|
| `started_head` | true: `start` started this head (`ray start --head`) and `stop` may stop it |
| `address`      | the head's GCS address, HOST:PORT                                           |
| `session_name` | Ray's session name of that head (`session_<date>_<pid>`)                    |
| `node_id`      | the head node's id                                                          |
| `token_auth`   | the head requires Ray's token authentication                                |
| `gcs_storage`  | where its GCS keeps the cluster's state: `rocksdb`, `redis` or `memory`     |
| `gcs_storage_location` | the RocksDB folder or the Redis HOST:PORT (empty for `memory`)      |

A file that cannot be read or parsed reads as no state. The temporary directory follows `TMPDIR`, so a test can
point the commands at an empty one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from cluster.gcs_storage import GcsStorage
from cluster.ray_auth import AUTH_MODE_VARIABLE


@dataclass(frozen=True, slots=True)
class HeadState:
    """What `start` records for `stop`: the Ray head it started (see the module docstring for the fields)."""

    started_head: bool
    address: str
    session_name: str
    node_id: str
    token_auth: bool
    gcs_storage: str = "memory"
    gcs_storage_location: str = ""

    @property
    def gcs(self) -> GcsStorage:
        """The head's GCS storage, as `cluster.gcs_storage` handles it."""
        return GcsStorage(self.gcs_storage, self.gcs_storage_location)


def state_file() -> Path:
    return Path(tempfile.gettempdir()) / f"raybroker-{os.getuid()}" / "cli-state.json"


def read_state() -> HeadState | None:
    """The recorded head, or None when there is no state file or it is unreadable."""
    try:
        body = json.loads(state_file().read_text(encoding="utf-8"))
        return HeadState(
            bool(body["started_head"]),
            str(body["address"]),
            str(body["session_name"]),
            str(body["node_id"]),
            bool(body["token_auth"]),
            str(body.get("gcs_storage", "memory")),
            str(body.get("gcs_storage_location", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_state(state: HeadState) -> None:
    path = state_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(state), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def forget_state() -> None:
    with contextlib.suppress(FileNotFoundError):
        state_file().unlink()


def settle_ray_auth_mode(starting_head: bool) -> None:
    """Sets `RAY_AUTH_MODE=token` for a command that starts a head or attaches to the one `start` recorded.

    Ray 2.60 reads `RAY_AUTH_MODE` once, when it is first imported, and a driver sends its token to an explicit
    address only in that mode (without it `ray.init` retries for ~20 s and fails with InvalidAuthToken). A head
    started by `start_head` has token authentication on unless `RAY_AUTH_MODE=disabled` (its token is this
    machine's own `~/.ray/auth_token`), so the CLI settles the mode before anything imports Ray. A mode the
    user set is kept.
    """
    if AUTH_MODE_VARIABLE in os.environ:
        return
    recorded = read_state()
    if starting_head or (recorded is not None and recorded.started_head and recorded.token_auth):
        os.environ[AUTH_MODE_VARIABLE] = "token"
