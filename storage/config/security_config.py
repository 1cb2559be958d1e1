"""The listener's security settings: TLS, SASL and the authorizer, under Kafka's broker keys and defaults.

| Kafka key                                 | type     | default         | meaning                             |
|-------------------------------------------|----------|-----------------|-------------------------------------|
| ssl.keystore.type                         | string   | JKS             | only PEM is read                    |
| ssl.keystore.location                     | string   | unset           | PEM: private key, certificate chain |
| ssl.key.password                          | password | unset           | decrypts the keystore's key         |
| ssl.truststore.type                       | string   | JKS             | only PEM is read                    |
| ssl.truststore.location                   | string   | unset           | PEM: CAs of client certificates     |
| ssl.client.auth                           | string   | none            | none, requested or required         |
| ssl.enabled.protocols                     | list     | TLSv1.2,TLSv1.3 | TLS versions (1.2 and up only)      |
| sasl.enabled.mechanisms                   | list     | GSSAPI          | SCRAM-SHA-256/512, PLAIN served     |
| sasl.server.max.receive.size              | int      | 524288          | largest frame before login          |
| connection.failed.authentication.delay.ms | int      | 100             | a failed login answered this late   |
| authorizer.class.name                     | string   | ""              | set: requests checked against ACLs  |
| super.users                               | string   | ""              | `User:a;User:b`: may do anything    |
| allow.everyone.if.no.acl.found            | boolean  | false           | allow what no ACL names             |

Which of them must be set depends on the listeners (`check_listeners`): an SSL or SASL_SSL listener needs a PEM
keystore; a SASL listener needs mechanisms raybroker serves. Kafka's defaults are kept even where raybroker cannot
serve them (JKS keystores, GSSAPI), so a Kafka `server.properties` means the same here or fails with a message
saying what to set, never silently less secure. The inline PEM keys (`ssl.keystore.key`, ...) are not read: the
Python `ssl` module loads keys from files only, and writing a private key to a temporary file is what this
broker must never do.

`authorizer.class.name` takes Kafka's authorizers' class names (`StandardAuthorizer`, `AclAuthorizer`), both
meaning raybroker's ACL authorizer; with none, every principal may do everything, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from storage.config.config_values import Password, check_fields, config_field, values_from_properties
from storage.errors import InvalidConfigError

PEM = "PEM"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
PLAIN = "PLAIN"
SERVED_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512, PLAIN)
TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
AUTHORIZERS = frozenset(
    {"org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer"}
)
SSL_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


@dataclass(frozen=True)
class SecurityKeys:
    """The security keys, each declared here only: `SecurityConfig` checks them, `BrokerConfig` holds them among a
    broker's keys and derives its `security_config` from them."""

    ssl_keystore_type: str = config_field("JKS", "string")
    ssl_keystore_location: str | None = config_field(None, "string")
    ssl_key_password: Password | None = config_field(None, "password")
    ssl_truststore_type: str = config_field("JKS", "string")
    ssl_truststore_location: str | None = config_field(None, "string")
    ssl_client_auth: str = config_field("none", "string", choices=("none", "requested", "required"))
    ssl_enabled_protocols: tuple[str, ...] = config_field(TLS_PROTOCOLS, "list")
    sasl_enabled_mechanisms: tuple[str, ...] = config_field(("GSSAPI",), "list")
    sasl_server_max_receive_size: int = config_field(524288, "int", low=1)
    connection_failed_authentication_delay_ms: int = config_field(100, "int", low=0)
    authorizer_class_name: str = config_field("", "string")
    super_users: str = config_field("", "string")
    allow_everyone_if_no_acl_found: bool = config_field(False, "boolean")


@dataclass(frozen=True)
class SecurityConfig(SecurityKeys):
    """The security keys (see the module docstring), each checked on creation."""

    def __post_init__(self) -> None:
        check_fields(self)
        unknown = [version for version in self.ssl_enabled_protocols if version not in TLS_PROTOCOLS]
        if unknown or not self.ssl_enabled_protocols:
            raise InvalidConfigError(
                f"invalid value {','.join(self.ssl_enabled_protocols)!r} for ssl.enabled.protocols: "
                f"expected some of {', '.join(TLS_PROTOCOLS)} (older TLS versions are not served)"
            )
        if self.authorizer_class_name and self.authorizer_class_name not in AUTHORIZERS:
            raise InvalidConfigError(
                f"invalid value {self.authorizer_class_name!r} for authorizer.class.name: "
                f"expected one of {', '.join(sorted(AUTHORIZERS))} or nothing"
            )
        for principal in self.super_user_principals:
            if ":" not in principal or principal.startswith(":") or principal.endswith(":"):
                raise InvalidConfigError(f"invalid principal {principal!r} in super.users: expected Type:name")

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> SecurityConfig:
        """The security keys from broker properties (Kafka's dotted names); other keys are ignored."""
        values, _ = values_from_properties(cls, properties)
        return cls(**values)

    @property
    def authorizer_enabled(self) -> bool:
        return bool(self.authorizer_class_name)

    @property
    def super_user_principals(self) -> frozenset[str]:
        """`super.users` split on `;`, as Kafka does (principal names may hold commas)."""
        return frozenset(part.strip() for part in self.super_users.split(";") if part.strip())

    def check_listeners(self, security_protocols: Iterable[str]) -> None:
        """Raises `InvalidConfigError` unless these settings can serve every listed security protocol."""
        protocols = set(security_protocols)
        if protocols & SSL_PROTOCOLS:
            if self.ssl_keystore_location is None:
                raise InvalidConfigError("an SSL or SASL_SSL listener needs ssl.keystore.location (a PEM file)")
            if self.ssl_keystore_type.upper() != PEM:
                raise InvalidConfigError(
                    f"ssl.keystore.type {self.ssl_keystore_type!r} is not served: set ssl.keystore.type=PEM"
                )
            if self.ssl_truststore_location is not None and self.ssl_truststore_type.upper() != PEM:
                raise InvalidConfigError(
                    f"ssl.truststore.type {self.ssl_truststore_type!r} is not served: set ssl.truststore.type=PEM"
                )
            if self.ssl_client_auth != "none" and self.ssl_truststore_location is None:
                raise InvalidConfigError(
                    f"ssl.client.auth={self.ssl_client_auth} needs ssl.truststore.location to check client certificates"
                )
        if protocols & SASL_PROTOCOLS:
            unserved = [name for name in self.sasl_enabled_mechanisms if name not in SERVED_MECHANISMS]
            if unserved or not self.sasl_enabled_mechanisms:
                raise InvalidConfigError(
                    f"sasl.enabled.mechanisms {','.join(self.sasl_enabled_mechanisms)!r} names mechanisms not served "
                    f"({', '.join(unserved) or 'none'}): a SASL listener needs some of {', '.join(SERVED_MECHANISMS)}"
                )
