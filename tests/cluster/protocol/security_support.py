"""A `SecurityView` over the controller's own credential and ACL stores, kept in memory (no Ray), and the TLS
material of the security tests: a `trustme` CA with a server certificate for 127.0.0.1 and client certificates."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme

from actors.core.security.acl_store import AclStore
from actors.core.security.acls import AclBinding, AclBindingFilter
from actors.core.security.credential_store import ScramCredentialStore
from actors.core.security.scram import ScramCredential


class MemorySecurityView:
    """The stores the controller uses, writing to a list instead of its metadata log."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any] | None]] = []
        self._credentials = ScramCredentialStore(self._write)
        self._acls = AclStore(self._write)

    def _write(self, key: str, value: dict[str, Any] | None) -> int:
        self.records.append((key, value))
        return len(self.records) - 1

    def add_user(self, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> None:
        self._credentials.upsert(user, ScramCredential.from_password(mechanism, password))

    def add_acls(self, *bindings: AclBinding) -> None:
        self._acls.create(bindings)

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get(user, mechanism)

    async def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        return self._credentials.credentials()

    async def upsert_scram_credential(self, user: str, credential: ScramCredential) -> None:
        self._credentials.upsert(user, credential)

    async def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        return self._credentials.delete(user, mechanism)

    async def acls_version(self) -> int:
        return self._acls.version

    async def acls(self) -> tuple[int, list[AclBinding]]:
        return self._acls.version, self._acls.bindings()

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        self._acls.create(bindings)

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        return self._acls.delete(filters)


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one test CA: the CA itself, the server's key and chain, and two clients' keys and chains."""

    ca: Path
    server: Path
    alice: Path
    bob: Path


def make_tls_files(folder: Path) -> TlsFiles:
    """A fresh CA with a server certificate for 127.0.0.1 and client certificates `CN=alice` and `CN=bob`."""
    ca = trustme.CA()
    files = TlsFiles(folder / "ca.pem", folder / "server.pem", folder / "alice.pem", folder / "bob.pem")
    ca.cert_pem.write_to_path(str(files.ca))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(files.server))
    for path, name in ((files.alice, "alice"), (files.bob, "bob")):
        ca.issue_cert(f"{name}@example.org", common_name=name).private_key_and_cert_chain_pem.write_to_path(str(path))
    return files
