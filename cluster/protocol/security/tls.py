"""TLS for SSL and SASL_SSL listeners, from PEM files, with Python's `ssl` module.

The server context takes its key and certificate chain from `ssl.keystore.location` (one PEM file, the key
decrypted with `ssl.key.password` when it is encrypted), the CAs that sign client certificates from
`ssl.truststore.location`, and `ssl.client.auth` as Kafka means it: `none` asks for no certificate, `requested`
asks and accepts a client without one, `required` refuses a client without a valid one. As in Kafka,
`ssl.client.auth` applies to SSL listeners only: a SASL_SSL client authenticates with SASL and is asked for no
certificate. Only TLS 1.2 and 1.3 are offered (`ssl.enabled.protocols` picks among them).

A client certificate's subject becomes the principal `User:<distinguished name>`, in RFC 2253 form as Java's
`X500Principal.getName()` writes it (`User:CN=alice,OU=eng,O=example`): what Kafka's default principal builder
gives, so ACLs written for a Kafka broker apply unchanged.
"""

from __future__ import annotations

import ssl

from cryptography import x509

from storage.config.security_config import SecurityConfig
from storage.errors import InvalidConfigError

_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def server_context(config: SecurityConfig, security_protocol: str) -> ssl.SSLContext:
    """The TLS context of an SSL or SASL_SSL listener; `InvalidConfigError` naming the key whose file cannot be
    used (the key's password never appears in it)."""
    if config.ssl_keystore_location is None:
        raise InvalidConfigError("an SSL or SASL_SSL listener needs ssl.keystore.location (a PEM file)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_VERSIONS[name] for name in config.ssl_enabled_protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]
    password = config.ssl_key_password.value if config.ssl_key_password is not None else None
    try:
        context.load_cert_chain(config.ssl_keystore_location, password=password)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(
            f"cannot load ssl.keystore.location {config.ssl_keystore_location!r} (a PEM private key and certificate "
            f"chain; an encrypted key needs ssl.key.password): {_reason(exc)}"
        ) from None
    if config.ssl_truststore_location is not None:
        try:
            context.load_verify_locations(cafile=config.ssl_truststore_location)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigError(
                f"cannot load ssl.truststore.location {config.ssl_truststore_location!r}: {_reason(exc)}"
            ) from None
    context.verify_mode = _VERIFY_MODES[config.ssl_client_auth if security_protocol == "SSL" else "none"]
    return context


def certificate_principal(ssl_object: ssl.SSLObject | None) -> str | None:
    """`User:<subject DN>` of the client's verified certificate, or None without one."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()


def _reason(exc: BaseException) -> str:
    """An OS or TLS error's reason alone: `str(SSLError)` repeats its arguments, which may be long."""
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
