"""What security costs on the wire: `wire_produce` over SASL_SSL against PLAINTEXT, same listener, same run.

| figure             | what                                                       | baseline                        |
|--------------------|------------------------------------------------------------|---------------------------------|
| `wire_produce_tls` | records/s, one confluent Producer into one partition,      | the same Producer over the same |
|                    | 100-byte values, `acks=1`, over SASL_SSL (TLS 1.3,         | listener's PLAINTEXT port       |
|                    | SCRAM-SHA-256 login), every record acknowledged            |                                 |
| `wire_fetch_tls`   | MB/s of values, one consumer reading a partition of 1 KiB  | the same consumer over PLAINTEXT|
|                    | values from offset 0 over SASL_SSL (256 MiB; 64 MiB with   | (where the listener `sendfile`s |
|                    | --quick): no `sendfile` through TLS                        | segment bytes)                  |

One listener serves both ports over the run's shared broker, so the ratio is the price of TLS and of the login
alone (for fetches, also of reading the segment bytes into the listener to encrypt them); the SCRAM user is
created through the controller, as `raybroker users --add` does. The server's key and a self-signed certificate
for 127.0.0.1 are made for the run with `cryptography` (the client trusts exactly that certificate). The two
sides are measured alternately, best of N, each client in a spawned process.
"""

from __future__ import annotations

import datetime
import ipaddress
import tempfile
from pathlib import Path

from benchmarks.bench_wire import FETCH_VALUE_BYTES, PRODUCE_VALUE_BYTES, create_topic, fetch_client, produce_client
from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.processes import in_process

GOAL_RATIO = 0.6
USER = "bench"
# A throwaway credential for a listener on 127.0.0.1 that lives as long as this run.
PASSWORD = "bench-wire-tls"
MECHANISM = "SCRAM-SHA-256"


def run(ctx: BenchContext) -> list[Figure]:
    from actors.clients.admin import Admin
    from cluster.protocol.listener import KafkaListener

    ctx.environment.broker()
    Admin().upsert_scram_credential(USER, MECHANISM, PASSWORD)
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as folder:
        certificate = _self_signed(Path(folder))
        properties = {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "num.partitions": "1",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certificate),
            "sasl.enabled.mechanisms": MECHANISM,
        }
        with KafkaListener(properties) as listener:
            targets = {
                "PLAINTEXT": (f"127.0.0.1:{listener.ports['PLAINTEXT']}", {}),
                "SASL_SSL": (
                    f"127.0.0.1:{listener.ports['SASL_SSL']}",
                    {
                        "security.protocol": "SASL_SSL",
                        "ssl.ca.location": str(certificate),
                        "sasl.mechanism": MECHANISM,
                        "sasl.username": USER,
                        "sasl.password": PASSWORD,
                    },
                ),
            }
            return [_wire_produce_tls(ctx, targets), _wire_fetch_tls(ctx, targets)]


def _wire_produce_tls(ctx: BenchContext, targets: dict[str, tuple[str, dict[str, str]]]) -> Figure:
    count = 100_000 if ctx.quick else 500_000
    repeats = 2 if ctx.quick else 3
    best = dict.fromkeys(targets, 0.0)
    for attempt in range(repeats):
        for name, (bootstrap, client) in targets.items():
            topic = create_topic(bootstrap, "tls", client)
            run = in_process(produce_client, bootstrap, topic, count, PRODUCE_VALUE_BYTES, client)
            best[name] = max(best[name], run.rate)
        ctx.progress(
            f"  wire_produce_tls {attempt + 1}/{repeats}: SASL_SSL {best['SASL_SSL']:,.0f} vs "
            f"PLAINTEXT {best['PLAINTEXT']:,.0f} rec/s"
        )
    return throughput_figure(
        "wire_produce_tls",
        best["SASL_SSL"],
        "rec/s",
        "PLAINTEXT, same listener",
        best["PLAINTEXT"],
        GOAL_RATIO,
        f"ratio >= {GOAL_RATIO}",
    )


def _wire_fetch_tls(ctx: BenchContext, targets: dict[str, tuple[str, dict[str, str]]]) -> Figure:
    total_bytes = (64 << 20) if ctx.quick else (256 << 20)
    count = total_bytes // FETCH_VALUE_BYTES
    repeats = 2 if ctx.quick else 3
    bootstrap, client = targets["PLAINTEXT"]
    topic = create_topic(bootstrap, "fetch-tls", client)
    in_process(produce_client, bootstrap, topic, count, FETCH_VALUE_BYTES, client)
    best = dict.fromkeys(targets, 0.0)
    for attempt in range(repeats):
        for name, (bootstrap, client) in targets.items():
            best[name] = max(best[name], in_process(fetch_client, bootstrap, topic, count, client).rate)
        ctx.progress(
            f"  wire_fetch_tls {attempt + 1}/{repeats}: SASL_SSL {best['SASL_SSL']:.0f} vs "
            f"PLAINTEXT {best['PLAINTEXT']:.0f} MB/s"
        )
    return throughput_figure(
        "wire_fetch_tls", best["SASL_SSL"], "MB/s", "PLAINTEXT, same listener", best["PLAINTEXT"], None, "report"
    )


def _self_signed(folder: Path) -> Path:
    """A PEM file holding a new EC private key and a self-signed certificate for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = folder / "server.pem"
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.write_bytes(key_pem + certificate.public_bytes(serialization.Encoding.PEM))
    path.chmod(0o600)
    return path
