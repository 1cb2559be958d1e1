"""The security keys under Kafka's names and defaults, what each listener kind requires, and hidden passwords."""

from __future__ import annotations

import re

import pytest

from storage.config.broker_config import BrokerConfig
from storage.config.config_values import Password, render_properties
from storage.config.security_config import SecurityConfig
from storage.errors import InvalidConfigError

SSL_KEYS = {"ssl.keystore.type": "PEM", "ssl.keystore.location": "/etc/rb/server.pem"}


def test_kafkas_defaults() -> None:
    config = SecurityConfig()
    assert config.ssl_keystore_type == "JKS"
    assert config.ssl_client_auth == "none"
    assert config.ssl_enabled_protocols == ("TLSv1.2", "TLSv1.3")
    assert config.sasl_enabled_mechanisms == ("GSSAPI",)
    assert config.sasl_server_max_receive_size == 524288
    assert config.connection_failed_authentication_delay_ms == 100
    assert not config.authorizer_enabled
    assert config.allow_everyone_if_no_acl_found is False


@pytest.mark.parametrize(
    ("properties", "fragment"),
    [
        ({"listeners": "SSL://127.0.0.1:0"}, "ssl.keystore.location"),
        ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/k.jks"}, "ssl.keystore.type=PEM"),
        ({"listeners": "SSL://127.0.0.1:0", **SSL_KEYS, "ssl.client.auth": "required"}, "ssl.truststore.location"),
        (
            {"listeners": "SSL://127.0.0.1:0", **SSL_KEYS, "ssl.truststore.location": "/t.jks"},
            "ssl.truststore.type=PEM",
        ),
        ({"listeners": "SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"}, "ssl.keystore.location"),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "GSSAPI"),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}, "OAUTHBEARER"),
        ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}, "ssl.enabled.protocols"),
        ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
        ({"authorizer.class.name": "com.example.MyAuthorizer"}, "authorizer.class.name"),
        ({"super.users": "alice"}, "super.users"),
    ],
)
def test_settings_a_listener_cannot_serve_are_refused_naming_the_key(properties: dict[str, str], fragment: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(fragment)):
        BrokerConfig.from_properties(properties)


def test_each_listener_kind_loads_with_what_it_needs() -> None:
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            **SSL_KEYS,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "/etc/rb/ca.pem",
            "ssl.client.auth": "requested",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:CN=ops,O=example",
        }
    )
    security = config.security_config
    assert security.authorizer_enabled
    assert security.super_user_principals == {"User:admin", "User:CN=ops,O=example"}
    assert [e.security_protocol for e in config.listener_config.endpoints] == [
        "PLAINTEXT",
        "SSL",
        "SASL_PLAINTEXT",
        "SASL_SSL",
    ]


def test_a_password_never_shows_in_a_repr_a_rendered_config_or_an_error() -> None:
    secret = "s3cr3t-Pa55"
    config = BrokerConfig.from_properties({"ssl.key.password": secret})
    assert config.security_config.ssl_key_password == Password(secret)
    assert config.security_config.ssl_key_password is not None
    assert config.security_config.ssl_key_password.value == secret
    assert secret not in repr(config) + repr(config.security_config) + str(config.to_properties())
    assert render_properties(config.security_config)["ssl.key.password"] == "[hidden]"
    with pytest.raises(InvalidConfigError) as raised:
        SecurityConfig(ssl_key_password=secret)  # type: ignore[arg-type]
    assert secret not in str(raised.value)
