"""Ray's authentication token for the clusters raybroker starts: created when none exists, readable by its owner only.

Ray 2.60 has token authentication (`RAY_AUTH_MODE=token`): every process that joins or talks to a cluster must
present the cluster's token, found in `RAY_AUTH_TOKEN` (the token itself), `RAY_AUTH_TOKEN_PATH` (a file) or
`~/.ray/auth_token`, in that order. `ray start --head` in token mode refuses to start without one
("Token authentication is enabled but no authentication token was found"), and an embedded `ray.init()` writes
one with the process umask (0644 here: readable by every user of the machine). So before raybroker starts a head
or an embedded cluster, `ensure_auth_token` makes sure a token exists where Ray will look, creating it with mode
0600 in a 0700 folder when none does, and narrowing an existing file of ours that others could read.

The token is 32 random bytes in hex, as Ray's own generator makes them (`secrets.token_hex`). It is never printed
or logged; only its path is.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from storage.errors import BrokerNotAvailableError

AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"
TOKEN_VARIABLE = "RAY_AUTH_TOKEN"
TOKEN_PATH_VARIABLE = "RAY_AUTH_TOKEN_PATH"
# Ray's generator: 256 bits of entropy.
TOKEN_BYTES = 32
TOKEN_FILE_MODE = 0o600
TOKEN_DIR_MODE = 0o700


def token_auth_disabled() -> bool:
    """Whether the user opted out of token authentication (`RAY_AUTH_MODE=disabled`)."""
    return os.environ.get(AUTH_MODE_VARIABLE, "").lower() == "disabled"


def default_token_path() -> Path:
    """Where Ray looks for the token when neither variable names one: `~/.ray/auth_token`."""
    return Path.home() / ".ray" / "auth_token"


def token_path() -> Path | None:
    """The file Ray reads the token from, or None when `RAY_AUTH_TOKEN` carries the token itself."""
    if os.environ.get(TOKEN_VARIABLE):
        return None
    named = os.environ.get(TOKEN_PATH_VARIABLE)
    return Path(named).expanduser() if named else default_token_path()


def ensure_auth_token() -> Path | None:
    """Makes sure Ray finds a token (see the module docstring); returns its file, None when `RAY_AUTH_TOKEN` holds it
    or token authentication is disabled. `BrokerNotAvailableError` when the file cannot be created."""
    if token_auth_disabled():
        return None
    path = token_path()
    if path is None:
        return None
    try:
        if not _create(path):
            _narrow(path)
    except OSError as exc:
        raise BrokerNotAvailableError(f"cannot create Ray's auth token {path}: {exc.strerror or exc}") from None
    return path


def _create(path: Path) -> bool:
    """Writes a new token at `path` unless a file is there (False then); never replaces another process's token."""
    if path.exists():
        return False
    path.parent.mkdir(mode=TOKEN_DIR_MODE, parents=True, exist_ok=True)
    # mkstemp: a new file of mode 0600 under a name no other thread or process uses.
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    temporary = Path(name)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(secrets.token_hex(TOKEN_BYTES))
            file.flush()
            os.fsync(file.fileno())
        # A hard link fails if another process created the token meanwhile: its token wins, ours is dropped.
        os.link(temporary, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return True


def _narrow(path: Path) -> None:
    """Takes group and other access away from an existing token file this user owns."""
    status = path.stat()
    if status.st_uid == os.getuid() and stat.S_IMODE(status.st_mode) & 0o077:
        path.chmod(TOKEN_FILE_MODE)
