"""The broker subcommands of `raybroker`, modelled on Apache Kafka's command-line tools.

| command          | Kafka's tool                 | what it does                                                  |
|------------------|------------------------------|---------------------------------------------------------------|
| `start`          | kafka-server-start.sh        | starts a local Ray head (or joins `--address`), then a broker |
| `stop`           | kafka-server-stop.sh         | clean broker shutdown, then the Ray head if `start` made it   |
| `topics`         | kafka-topics.sh              | `--create`, `--list`, `--describe`, `--alter`, `--delete`     |
| `produce`        | kafka-console-producer.sh    | one record per stdin line, `key SEP value` with a separator   |
| `consume`        | kafka-console-consumer.sh    | records as text lines, Kafka's DefaultMessageFormatter fields |
| `get-offsets`    | kafka-get-offsets.sh         | `topic:partition:offset` lines for a `--time` spec            |
| `delete-records` | kafka-delete-records.sh      | moves a partition's log start offset, prints the low watermark |

Every command but `start` attaches to a running cluster: `--address HOST:PORT` (the GCS), or by default
`$RAY_ADDRESS`, else the head `raybroker start` started on this machine while it runs, else `auto` (the Ray
cluster running on this machine). Ray's own `ray.init` waits minutes for a GCS that
is not there (measured: > 2 min against a closed port), so the address is first probed with a plain TCP connect
(`PROBE_TIMEOUT_S`), and a missing cluster is one line and exit 1 at once.

`start` without `--address` runs `ray start --head` (`cluster.runtime.start_head`), reads which head that
was from the command line of the gcs_server on port 6379 (not from Ray's `ray_current_cluster` file, which other
Ray programs rewrite and delete), and records it in a small JSON state file written atomically
(`<tempdir>/raybroker-<uid>/cli-state.json`: GCS address, Ray session name, head node id, whether the head
uses Ray's token authentication). If the broker then fails to start, the head is stopped again. `stop` stops
that head only when the cluster it is connected to is that same session. It does not run `ray stop`, which
kills every Ray process of the machine, including other programs' own clusters: it terminates only the
processes whose command line names the recorded session or head node id, and their children, in `ray stop`'s
order (raylet first, gcs_server last), then clears `ray_current_cluster` if it still points at that head.

Token authentication (Ray 2.60): a head started where a token exists (`~/.ray/auth_token`) requires it, and
a driver sends it to an explicit address only with `RAY_AUTH_MODE=token`. For the head recorded in the state
file the commands set that themselves; for any other cluster the user does, as Ray documents.

Usage errors (exit 2): argparse's own (two lines: usage, then the error), and option combinations a command
does not accept (`UsageError`, one line). Every broker-side refusal (unknown topic or partition, invalid topic
name or config, no cluster, no broker) is the broker's typed error, printed by `cluster.cli.main.main` as one line
with exit 1. This module imports only the standard library and `storage` at load time; Ray and the `actors`
package are imported when a command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage.errors import BrokerNotAvailableError, RaybrokerError

if TYPE_CHECKING:
    from actors.clients.admin import TopicDescription
    from actors.clients.consumer import Consumer, ConsumerRecord
    from actors.clients.producer import RecordMetadata
    from storage.config.broker_config import BrokerConfig

EXIT_OK = 0
DEFAULT_ADDRESS = "auto"
# A GCS on the same machine or LAN accepts a TCP connection in well under a second; 3 s leaves room for a
# loaded 2-core box without making a typo in --address feel like a hang.
PROBE_TIMEOUT_S = 3.0
# Per process group of `stop` (raylet, the other daemons, gcs_server): SIGTERM, then SIGKILL after this long.
# All three groups of an idle head were gone within 6.6 s here.
STOP_GRACE_S = 10.0
KILL_WAIT_S = 2.0
# One poll waits at most this long, so `--timeout-ms` and Ctrl-C are noticed promptly.
POLL_TIMEOUT_MS = 500
# `ray start --head` without --port (as `cluster.runtime.start_head` runs it) puts its GCS here.
RAY_HEAD_PORT = 6379
REPO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "server.properties"
TIME_SPECS = ("earliest", "latest", "max-timestamp")
# Kafka's numeric synonyms of the ListOffsets sentinels (-4..-6 are tiered-storage specs raybroker lacks).
TIME_SYNONYMS = {"-2": "earliest", "-1": "latest", "-3": "max-timestamp"}
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")


class UsageError(Exception):
    """Options a command does not accept together (exit 2, one line)."""


# --- argument types ------------------------------------------------------------------------------------


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected an integer >= 1, got '0'")
    return value


def _key_value(text: str) -> tuple[str, str]:
    key, found, value = text.partition("=")
    if not found or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _time_spec(text: str) -> str | int:
    """Kafka's GetOffsetShell `--time`: a name, its numeric synonym, or a timestamp in ms."""
    name = TIME_SYNONYMS.get(text, text)
    if name in TIME_SPECS:
        return name
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(
        f"malformed time {text!r}: use -1 or latest, -2 or earliest, -3 or max-timestamp, or a timestamp in ms"
    )


def _consume_offset(text: str) -> str | int:
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        return _non_negative_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"invalid offset {text!r}: valid values are 'earliest', 'latest', or an integer >= 0"
        ) from None


def _delete_offset(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -2
    if value < -1:
        raise argparse.ArgumentTypeError(f"expected an offset >= 0, or -1 for the high watermark, got {text!r}")
    return value


def _partition_list(text: str) -> list[int]:
    return [_non_negative_int(part.strip()) for part in text.split(",") if part.strip()]


# --- connecting ----------------------------------------------------------------------------------------


def _recorded_ray_address() -> str | None:
    """The GCS address the last `ray start` on this machine wrote (what `ray.init("auto")` tries first)."""
    # A private helper of Ray (pinned at 2.60.0): the file's location depends on RAY_TMPDIR/TMPDIR.
    from ray._common.utils import get_ray_address_file

    with contextlib.suppress(OSError):
        return Path(get_ray_address_file(None)).read_text(encoding="utf-8").strip() or None
    return None


def _probe(address: str) -> None:
    """Fails fast when nothing listens at the GCS address `ray.init(address)` would wait for."""
    target: str | None = address
    if address == "auto":
        target = os.environ.get("RAY_ADDRESS") or _recorded_ray_address()
    if not target or target in ("auto", "local") or "://" in target:
        # Ray resolves these itself, and answers at once when no cluster runs on this machine.
        return
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise BrokerNotAvailableError(f"bad Ray address {target!r}: expected HOST:PORT of the cluster's GCS")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise BrokerNotAvailableError(
            f"no Ray cluster at {target} ({reason}); start one with `raybroker start`"
        ) from None


def connect_to_cluster(address: str | None) -> None:
    """Attaches this process to the cluster at `address`; a no-op when already attached.

    Without `--address` and `RAY_ADDRESS`, the head `start` recorded is used while it runs (Ray's own `auto`
    would follow `ray_current_cluster`, which other Ray programs rewrite), else `auto`.
    """
    from cluster.runtime import ensure_ray

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return
    own = read_state()
    own_head = own if own is not None and own.started_head else None
    if address is None and not os.environ.get("RAY_ADDRESS") and own_head is not None and _reachable(own_head.address):
        address = own_head.address
    address = address or DEFAULT_ADDRESS
    _probe(address)
    if own_head is not None and own_head.token_auth and address == own_head.address:
        # Ray 2.60 turns token authentication on for a head started where a token exists (~/.ray/auth_token),
        # and a driver sends its token to an explicit address (argument or RAY_ADDRESS) only with
        # RAY_AUTH_MODE=token; without it, ray.init retries for ~20 s and fails. The head `start` started
        # on this machine holds this machine's own token.
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    ensure_ray(address)


# --- state of `start` ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CliState:
    """What `start` records for `stop`: the Ray head it started, if any."""

    started_head: bool
    address: str
    session_name: str
    node_id: str
    token_auth: bool


def state_file() -> Path:
    return Path(tempfile.gettempdir()) / f"raybroker-{os.getuid()}" / "cli-state.json"


def read_state() -> CliState | None:
    try:
        body = json.loads(state_file().read_text(encoding="utf-8"))
        return CliState(
            bool(body["started_head"]),
            str(body["address"]),
            str(body["session_name"]),
            str(body["node_id"]),
            bool(body["token_auth"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_state(state: CliState) -> None:
    path = state_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(state), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def _forget_state() -> None:
    with contextlib.suppress(FileNotFoundError):
        state_file().unlink()


def _reachable(address: str) -> bool:
    try:
        _probe(address)
    except BrokerNotAvailableError:
        return False
    return True


# --- stopping a Ray head started by `start` ------------------------------------------------------------


def terminate_ray_session(state: CliState) -> None:
    """Terminates the processes of the recorded Ray session only (see the module docstring)."""
    import psutil

    own = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    family: dict[int, tuple[psutil.Process, str]] = {}
    for proc in psutil.process_iter(["cmdline", "name"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if proc.pid in own or (state.session_name not in cmdline and state.node_id not in cmdline):
            continue
        family[proc.pid] = (proc, proc.info["name"] or "")
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                if child.pid not in own:
                    with contextlib.suppress(psutil.Error):
                        family.setdefault(child.pid, (child, child.name()))
    # `ray stop`'s order: the raylet first (it stops its workers and agents), gcs_server last.
    groups = [
        [proc for proc, name in family.values() if name == "raylet"],
        [proc for proc, name in family.values() if name not in ("raylet", "gcs_server")],
        [proc for proc, name in family.values() if name == "gcs_server"],
    ]
    for group in groups:
        for proc in group:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(group, timeout=STOP_GRACE_S)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=KILL_WAIT_S)
    if _recorded_ray_address() == state.address:
        # What `ray stop` does too, so that `auto` does not go on to find a dead head.
        from ray._common.utils import get_ray_address_file

        with contextlib.suppress(OSError):
            Path(get_ray_address_file(None)).unlink()


# --- start / stop --------------------------------------------------------------------------------------


def _broker_config(args: argparse.Namespace) -> BrokerConfig:
    """server.properties, then `--log-dirs`, then `--override`s; log dirs made absolute (actors run elsewhere)."""
    from storage.config.broker_config import BrokerConfig, load_server_properties

    path = args.config if args.config is not None else (REPO_CONFIG if REPO_CONFIG.is_file() else None)
    properties = load_server_properties(path).to_properties() if path is not None else {}
    if args.log_dirs is not None:
        properties["log.dirs"] = args.log_dirs
    overrides = dict(args.override or ())
    # Kafka's synonyms: an overridden broker.id or log.dir must replace the file's node.id or log.dirs, which
    # would otherwise conflict with it (broker.id) or win over it (log.dirs).
    for key, synonym in (("broker.id", "node.id"), ("log.dir", "log.dirs")):
        if key in overrides and synonym not in overrides:
            properties.pop(synonym, None)
    properties.update(overrides)
    config = BrokerConfig.from_properties(properties)
    absolute = ",".join(str(Path(directory).expanduser().absolute()) for directory in config.log_dirs)
    return BrokerConfig.from_properties({**config.to_properties(), "log.dirs": absolute})


def _start(args: argparse.Namespace) -> int:
    config = _broker_config(args)
    if args.address is not None:
        connect_to_cluster(args.address)
        return _start_broker_and_report(config, started=None)
    previous = read_state()
    if previous is not None and previous.started_head:
        if _reachable(previous.address):
            raise RaybrokerError(
                f"a Ray head started by `raybroker start` is running at {previous.address}: stop it with "
                f"`raybroker stop`, or start a broker on it with `raybroker start --address {previous.address}`"
            )
        _forget_state()
    from cluster.runtime import start_head

    start_head()
    state = _started_head()
    _write_state(state)
    try:
        connect_to_cluster(state.address)
        return _start_broker_and_report(config, started=state)
    except BaseException:
        ray = sys.modules.get("ray")
        if ray is not None:
            ray.shutdown()
        terminate_ray_session(state)
        _forget_state()
        raise


def _started_head() -> CliState:
    """The head `ray start --head` has just started: the gcs_server on Ray's default port (a port has one owner).

    Read from its command line rather than from Ray's `ray_current_cluster` file, which any other Ray program
    on the machine may rewrite or delete meanwhile (`ray.cluster_utils.Cluster` deletes it on shutdown).
    """
    import psutil

    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] != "gcs_server":
            continue
        flags = dict(arg.split("=", 1) for arg in proc.info["cmdline"] or () if arg.startswith("--") and "=" in arg)
        if (
            flags.get("--gcs_server_port") == str(RAY_HEAD_PORT)
            and {"--node-ip-address", "--session-name", "--node-id"} <= flags.keys()
        ):
            token_auth = False
            with contextlib.suppress(psutil.Error):
                token_auth = proc.environ().get("RAY_AUTH_MODE", "").lower() == "token"
            address = f"{flags['--node-ip-address']}:{RAY_HEAD_PORT}"
            return CliState(True, address, flags["--session-name"], flags["--node-id"], token_auth)
    raise BrokerNotAvailableError(f"`ray start --head` succeeded, but no Ray GCS listens on port {RAY_HEAD_PORT}")


def _start_broker_and_report(config: BrokerConfig, started: CliState | None) -> int:
    import ray

    from actors.clients.broker import start_broker

    node_id = start_broker(config)
    address = ray.get_runtime_context().gcs_address
    if started is not None:
        print(f"Started a local Ray head at {address} (Ray session {started.session_name}).")
    print(f"Broker running on Ray node {node_id}, log dirs: {', '.join(config.log_dirs)}")
    print("Connect from Python:")
    print(f'    import ray; ray.init(address="{address}")')
    print("    from actors import Broker; broker = Broker.connect()")
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        print(
            "    (the cluster uses Ray's token authentication: from Python, or from another machine, set "
            "RAY_AUTH_MODE=token and provide the token of ~/.ray/auth_token)"
        )
    print(f"Or from this CLI: raybroker topics --list --address {address}")
    stop_hint = "the broker and the Ray head" if started is not None else "the broker"
    print(f"Stop {stop_hint} with: raybroker stop --address {address}")
    return EXIT_OK


def _stop(args: argparse.Namespace) -> int:
    state = read_state()
    ray_module = sys.modules.get("ray")
    attached = ray_module is not None and ray_module.is_initialized()
    own_head_runs = state is not None and state.started_head and _reachable(state.address)
    if not (attached or own_head_runs or args.address or os.environ.get("RAY_ADDRESS")):
        # `auto` would pick any Ray cluster of this machine, other programs' embedded ones included, and stop
        # the broker there: shutting a broker down takes a named target.
        if state is not None:
            _forget_state()
        raise UsageError(
            "no Ray head started by `raybroker start` is running here; name the cluster whose broker to stop "
            "with --address ADDR (or --address auto)"
        )
    try:
        connect_to_cluster(args.address)
    except BrokerNotAvailableError:
        if state is not None and not own_head_runs:
            _forget_state()
        raise
    import ray

    from actors.clients.broker import stop_broker

    session = ray.get_runtime_context().get_session_name()
    ours = state is not None and state.started_head and state.session_name == session
    try:
        end_offsets = stop_broker()
    except BrokerNotAvailableError as exc:
        if not ours:
            raise
        print(f"No broker was running ({exc}).", file=sys.stderr)
    else:
        print("Broker stopped cleanly (checkpoints and .kafka_cleanshutdown markers written).")
        print("Final log end offsets:")
        for name in sorted(end_offsets, key=_partition_sort_key):
            print(f"    {name}\t{end_offsets[name]}")
    if ours:
        assert state is not None
        ray.shutdown()
        terminate_ray_session(state)
        _forget_state()
        print(f"Stopped the Ray head at {state.address} (Ray session {state.session_name}).")
    return EXIT_OK


def _partition_sort_key(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")
    return (topic, int(partition)) if partition.isdigit() else (name, -1)


# --- topics --------------------------------------------------------------------------------------------


def _check_topic_options(args: argparse.Namespace) -> None:
    action = args.action
    if action in ("create", "alter", "delete") and args.topic is None:
        raise UsageError(f"topics --{action} needs --topic")
    if args.partitions is not None and action not in ("create", "alter"):
        raise UsageError("--partitions goes with --create or --alter")
    if args.config and action not in ("create", "alter"):
        raise UsageError("--config goes with --create or --alter")
    if action == "alter" and args.partitions is None and not args.config:
        raise UsageError("topics --alter needs --partitions N and/or --config KEY=VALUE")
    if args.if_not_exists and action != "create":
        raise UsageError("--if-not-exists goes with --create")
    if args.if_exists and action not in ("alter", "delete", "describe"):
        raise UsageError("--if-exists goes with --alter, --delete or --describe")
    if args.topic is not None and action == "list":
        raise UsageError("--list takes no --topic (use --describe --topic T)")


def _topics(args: argparse.Namespace) -> int:
    _check_topic_options(args)
    connect_to_cluster(args.address)
    from actors import Admin
    from storage.errors import TopicExistsError, UnknownTopicOrPartitionError

    admin = Admin()
    action = args.action
    config = dict(args.config or ())
    try:
        if action == "create":
            try:
                admin.create_topic(args.topic, args.partitions or 1, config)
            except TopicExistsError:
                if not args.if_not_exists:
                    raise
                return EXIT_OK
            print(f"Created topic {args.topic}.")
        elif action == "list":
            for name in admin.list_topics(include_internal=not args.exclude_internal):
                print(name)
        elif action == "describe":
            names = [args.topic] if args.topic else admin.list_topics(include_internal=not args.exclude_internal)
            for name in names:
                for line in describe_lines(admin.describe_topic(name)):
                    print(line)
        elif action == "alter":
            if args.partitions is not None:
                admin.add_partitions(args.topic, args.partitions)
            if config:
                admin.alter_topic_config(args.topic, config)
        else:
            admin.delete_topic(args.topic)
    except UnknownTopicOrPartitionError:
        if args.if_exists and args.topic is not None:
            return EXIT_OK
        raise
    return EXIT_OK


def describe_lines(description: TopicDescription) -> list[str]:
    """Kafka's `kafka-topics.sh --describe` layout, with raybroker's placement and log numbers per partition."""
    configs = ",".join(f"{key}={value}" for key, value in sorted(description.config.items()))
    lines = [f"Topic: {description.name}\tPartitionCount: {len(description.partitions)}\tConfigs: {configs}"]
    for p in description.partitions:
        lines.append(
            f"\tTopic: {description.name}\tPartition: {p.partition}\tNode: {p.node_id}\tLogDir: {p.log_dir}"
            f"\tLogStartOffset: {p.log_start_offset}\tLogEndOffset: {p.log_end_offset}"
            f"\tHighWatermark: {p.high_watermark}\tSizeBytes: {p.size_bytes}\tSegments: {p.segments}"
        )
    return lines


# --- produce -------------------------------------------------------------------------------------------


class _DeliveryTally:
    """Counts acknowledged and failed records from the producer's callbacks; keeps the first error only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.delivered = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def __call__(self, future: Future[RecordMetadata]) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.delivered += 1
                return
            self.failed += 1
            if self.first_error is None:
                self.first_error = error


def _input_lines() -> Iterator[bytes]:
    """stdin's lines without their line ending (\\n, \\r\\n), as bytes: read raw when stdin has a buffer."""
    raw = getattr(sys.stdin, "buffer", None)
    lines: Iterator[bytes] = iter(raw) if raw is not None else (text.encode("utf-8") for text in sys.stdin)
    for line in lines:
        if line.endswith(b"\n"):
            line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
        yield line


def _produce(args: argparse.Namespace) -> int:
    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    connect_to_cluster(args.address)
    from actors import Broker, Producer

    broker = Broker.connect()
    if args.partition is None:
        broker.topic(args.topic)
    else:
        broker.partition(args.topic, args.partition)
    separator = None if args.key_separator is None else args.key_separator.encode("utf-8")
    tally = _DeliveryTally()
    sent = 0
    producer = Producer(broker, compression_type=args.compression)
    try:
        for number, line in enumerate(_input_lines(), start=1):
            key: bytes | None = None
            value = line
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    raise RaybrokerError(f"line {number}: no key separator {args.key_separator!r} found")
            try:
                future = producer.send(args.topic, value=value, key=key, partition=args.partition)
            except RaybrokerError as exc:
                raise RaybrokerError(f"line {number}: {type(exc).__name__}: {exc}") from exc
            future.add_done_callback(tally)
            sent += 1
    finally:
        producer.close()
    if tally.first_error is not None:
        raise RaybrokerError(
            f"{tally.failed} of {sent} records were not written to {args.topic}; the first failed with "
            f"{type(tally.first_error).__name__}: {tally.first_error}"
        ) from tally.first_error
    print(f"Produced {tally.delivered} records to {args.topic}.", file=sys.stderr)
    return EXIT_OK


# --- consume -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordFormat:
    """Kafka's DefaultMessageFormatter: optional timestamp, partition, offset and key, then the value, joined
    by the separator (`print.timestamp`, `print.partition`, `print.offset`, `print.key`, `key.separator`)."""

    timestamp: bool = False
    partition: bool = False
    offset: bool = False
    key: bool = False
    separator: str = "\t"

    def render(self, record: ConsumerRecord) -> str:
        from storage.records.record_batch import TimestampType

        fields = []
        if self.timestamp:
            if record.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
                fields.append("NO_TIMESTAMP")
            else:
                fields.append(f"{record.timestamp_type.kafka_name}:{record.timestamp}")
        if self.partition:
            fields.append(f"Partition:{record.partition}")
        if self.offset:
            fields.append(f"Offset:{record.offset}")
        if self.key:
            fields.append(as_text(record.key))
        fields.append(as_text(record.value))
        return self.separator.join(fields)


def as_text(data: bytes | None) -> str:
    """UTF-8 text; bytes that are not UTF-8 shown as `\\xNN` escapes (never evaluated); `null` for None."""
    if data is None:
        return "null"
    return bytes(data).decode("utf-8", errors="backslashreplace")


def _check_consume_options(args: argparse.Namespace) -> None:
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    if args.offset is not None and args.from_beginning:
        raise UsageError("--from-beginning and --offset cannot be used together")
    if args.group is not None and args.partition is not None:
        raise UsageError("--group and --partition cannot be used together")
    if args.group == "":
        raise UsageError("--group must not be empty")


def _consume(args: argparse.Namespace) -> int:
    _check_consume_options(args)
    connect_to_cluster(args.address)
    from actors import Consumer

    # With a group, the consumer auto-commits its positions, which never run ahead of what was printed
    # (each poll asks for at most what is still to print), and commits once more on close.
    consumer = Consumer(
        group_id=args.group,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=args.group is not None,
    )
    layout = RecordFormat(
        args.print_timestamp, args.print_partition, args.print_offset, args.print_key, args.key_separator
    )
    printed = 0

    def write(record: ConsumerRecord) -> None:
        nonlocal printed
        print(layout.render(record))
        printed += 1

    interrupted = False
    try:
        _assign(consumer, args)
        _poll_until_done(consumer, write, args.max_messages, args.timeout_ms)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        consumer.close()
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    if interrupted:
        raise KeyboardInterrupt
    return EXIT_OK


def _assign(consumer: Consumer, args: argparse.Namespace) -> None:
    if args.partition is None:
        consumer.subscribe([args.topic])
        return
    tp = (args.topic, args.partition)
    consumer.assign([tp])
    start = args.offset if args.offset is not None else ("earliest" if args.from_beginning else "latest")
    if start == "earliest":
        consumer.seek_to_beginning([tp])
    elif start == "latest":
        consumer.seek_to_end([tp])
    else:
        consumer.seek(tp, start)


def _poll_until_done(
    consumer: Consumer, write: Callable[[ConsumerRecord], None], max_messages: int | None, timeout_ms: int | None
) -> None:
    """Polls until `max_messages` are written or, with `timeout_ms`, nothing came for that long."""
    written = 0
    idle_since = time.monotonic()
    while max_messages is None or written < max_messages:
        wait_ms = POLL_TIMEOUT_MS
        if timeout_ms is not None:
            remaining_ms = timeout_ms - (time.monotonic() - idle_since) * 1000
            wait_ms = max(0, min(POLL_TIMEOUT_MS, int(remaining_ms)))
        limit = None if max_messages is None else max_messages - written
        records = consumer.poll(timeout_ms=wait_ms, max_records=limit)
        for record in records:
            write(record)
        if records:
            sys.stdout.flush()
            written += len(records)
            idle_since = time.monotonic()
        elif timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
            return


# --- get-offsets / delete-records ----------------------------------------------------------------------


def _get_offsets(args: argparse.Namespace) -> int:
    connect_to_cluster(args.address)
    from actors import Admin

    admin = Admin()
    topics = [args.topic] if args.topic else admin.list_topics(include_internal=not args.exclude_internal_topics)
    wanted = None if args.partitions is None else set(args.partitions)
    matched = 0
    for topic in topics:
        answers = admin.list_offsets(topic, args.time)
        for partition in sorted(answers):
            if wanted is not None and partition not in wanted:
                continue
            matched += 1
            found = answers[partition]
            # As Kafka's tool: a partition without an answer (no record at or after the timestamp) is left out.
            if found is not None:
                print(f"{topic}:{partition}:{found[0]}")
    if matched == 0:
        raise RaybrokerError("no topic partition matches the given --topic/--partitions")
    return EXIT_OK


def _delete_records(args: argparse.Namespace) -> int:
    connect_to_cluster(args.address)
    from actors import Admin

    low_watermark = Admin().delete_records(args.topic, args.partition, args.offset)
    print("Records delete operation completed:")
    print(f"partition: {args.topic}-{args.partition}\tlow_watermark: {low_watermark}")
    return EXIT_OK


# --- parsers -------------------------------------------------------------------------------------------

ADDRESS_HELP = (
    "the Ray cluster to use: HOST:PORT of its GCS, or 'auto' (default: $RAY_ADDRESS, else the head `raybroker "
    "start` started, else the cluster running on this machine). A cluster with Ray's token authentication "
    "needs RAY_AUTH_MODE=token for an explicit address, except the head `raybroker start` started here"
)
BROKER_EPILOG = (
    "Exit codes: 0 ok; 1 broker error (no cluster or broker, unknown topic or partition, invalid topic name or "
    "config), one line on stderr; 2 usage error; 130 interrupted (Ctrl-C)."
)


def add_broker_commands(subcommands: Any) -> None:
    """Adds `start`, `stop`, `topics`, `produce`, `consume`, `get-offsets` and `delete-records` to `subcommands`
    (the result of `add_subparsers`); each stores its handler in `handler`."""
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--address", metavar="ADDR", default=None, help=ADDRESS_HELP)

    def command(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        return subcommands.add_parser(
            name,
            parents=[connection],
            help=help_text,
            description=description,
            epilog=BROKER_EPILOG,
        )

    _add_start(command)
    _add_stop(command)
    _add_topics(command)
    _add_produce(command)
    _add_consume(command)
    _add_get_offsets(command)
    _add_delete_records(command)


CommandFactory = Callable[[str, str, str], argparse.ArgumentParser]


def _add_start(command: CommandFactory) -> None:
    start = command(
        "start",
        "start a broker (and a local Ray head) like kafka-server-start.sh",
        "Start a broker. Without --address: start a local Ray head daemon (`ray start --head`, 4 logical CPUs, "
        "no dashboard), attach to it and start this node's broker (the cluster's controller, this node's log "
        "manager over its log.dirs, the __consumer_offsets topic); the processes outlive this command. With "
        "--address: join that running cluster and start this node's broker on it. Prints how to connect.",
    )
    start.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="broker properties in Kafka's names (default: the repo's configs/server.properties if present, "
        "else Kafka's defaults)",
    )
    start.add_argument("--log-dirs", metavar="A,B", default=None, help="log dirs of this node (overrides log.dirs)")
    start.add_argument(
        "--override",
        type=_key_value,
        action="append",
        metavar="KEY=VALUE",
        help="a broker property that wins over --config and --log-dirs (may be repeated)",
    )
    start.set_defaults(handler=_start)


def _add_stop(command: CommandFactory) -> None:
    stop = command(
        "stop",
        "stop the broker cleanly (and the Ray head `start` started)",
        "Clean shutdown of every node's broker: partitions flushed and closed, recovery-point, log-start and "
        "high-watermark checkpoints and .kafka_cleanshutdown markers written, then the controller. If "
        "`raybroker start` started the Ray head of this cluster, that head is stopped too (only its own "
        "processes: other Ray clusters on this machine are left alone). Prints the final log end offsets. "
        "Without --address or $RAY_ADDRESS it stops only that head's broker, never just any cluster 'auto' "
        "would find.",
    )
    stop.set_defaults(handler=_stop)


def _add_topics(command: CommandFactory) -> None:
    topics = command(
        "topics",
        "create, list, describe, alter and delete topics like kafka-topics.sh",
        "Manage topics, like kafka-topics.sh. --describe prints Kafka's layout: a line 'Topic: T "
        "PartitionCount: N Configs: k=v,...', then one line per partition with its Ray node, log dir, log "
        "start and end offsets, high watermark, size and segment count.",
    )
    actions = topics.add_mutually_exclusive_group(required=True)
    for action, text in (
        ("create", "create --topic with --partitions (default 1) and --config overrides"),
        ("list", "list topic names"),
        ("describe", "describe --topic, or every topic"),
        ("alter", "grow --topic to --partitions N and/or merge --config overrides into its configs"),
        ("delete", "delete --topic (its folders go after file.delete.delay.ms)"),
    ):
        actions.add_argument(f"--{action}", dest="action", action="store_const", const=action, help=text)
    topics.add_argument("--topic", metavar="T", help="the topic")
    topics.add_argument("--partitions", type=_positive_int, metavar="N", help="partition count (topics never shrink)")
    topics.add_argument(
        "--config",
        type=_key_value,
        action="append",
        metavar="KEY=VALUE",
        help="a topic config in Kafka's names, e.g. retention.ms=60000 (may be repeated)",
    )
    topics.add_argument("--if-not-exists", action="store_true", help="--create: do nothing if the topic exists")
    topics.add_argument("--if-exists", action="store_true", help="--alter/--delete/--describe: do nothing if missing")
    topics.add_argument("--exclude-internal", action="store_true", help="--list/--describe: leave out internal topics")
    topics.set_defaults(handler=_topics)


def _add_produce(command: CommandFactory) -> None:
    produce = command(
        "produce",
        "send stdin lines as records like kafka-console-producer.sh",
        "Read lines from stdin and send each as one record (the line ending is not part of it; bytes are sent "
        "as read). With --key-separator, each line is KEY<SEP>VALUE, split at the first separator, and a line "
        "without it is an error. Records are batched, idempotent, and all acknowledged before the command ends; "
        "a one-line count goes to stderr.",
    )
    produce.add_argument("--topic", required=True, metavar="T", help="the topic")
    produce.add_argument("--key-separator", metavar="SEP", default=None, help="split each line into key and value")
    produce.add_argument(
        "--compression", choices=COMPRESSION_TYPES, default="none", help="batch compression (default: none)"
    )
    produce.add_argument(
        "--partition",
        type=_non_negative_int,
        metavar="P",
        help="send every record to this partition (default: by key hash; unkeyed records stick to a partition "
        "per batch)",
    )
    produce.set_defaults(handler=_produce)


def _add_consume(command: CommandFactory) -> None:
    consume = command(
        "consume",
        "print records as text lines like kafka-console-consumer.sh",
        "Print records as lines: optional 'CreateTime:<ms>', 'Partition:<p>', 'Offset:<o>' and the key, then "
        "the value, separated by --key-separator (Kafka's DefaultMessageFormatter). Keys and values are shown as "
        "UTF-8 text; bytes that are not UTF-8 appear as \\xNN escapes and a missing key or value as 'null'. "
        "Without --partition, reads every partition of the topic from the group's committed offsets, else "
        "from the end (or the beginning with --from-beginning). Runs until --max-messages, until idle for "
        "--timeout-ms, or until Ctrl-C; the count goes to stderr.",
    )
    consume.add_argument("--topic", required=True, metavar="T", help="the topic")
    consume.add_argument(
        "--from-beginning",
        action="store_true",
        help="start from the log start offset when there is no committed offset (default: the end)",
    )
    consume.add_argument("--partition", type=_non_negative_int, metavar="P", help="read only this partition")
    consume.add_argument(
        "--offset",
        type=_consume_offset,
        metavar="O",
        help="with --partition: start at this offset, 'earliest' or 'latest' (default: latest)",
    )
    consume.add_argument("--max-messages", type=_positive_int, metavar="N", help="exit after printing N records")
    consume.add_argument(
        "--timeout-ms", type=_non_negative_int, metavar="MS", help="exit when no record came for MS milliseconds"
    )
    consume.add_argument(
        "--group", metavar="G", help="consumer group: start at its committed offsets and commit what was printed"
    )
    consume.add_argument("--print-key", action="store_true", help="print the key before the value")
    consume.add_argument("--print-offset", action="store_true", help="print 'Offset:<o>'")
    consume.add_argument("--print-partition", action="store_true", help="print 'Partition:<p>'")
    consume.add_argument("--print-timestamp", action="store_true", help="print '<timestamp type>:<ms>'")
    consume.add_argument(
        "--key-separator",
        metavar="SEP",
        default="\t",
        help="between the printed fields (Kafka's key.separator; default: tab)",
    )
    consume.set_defaults(handler=_consume)


def _add_get_offsets(command: CommandFactory) -> None:
    offsets = command(
        "get-offsets",
        "print topic:partition:offset lines like kafka-get-offsets.sh",
        "For each partition, print 'topic:partition:offset' for --time: latest (-1, the default: the log end "
        "offset), earliest (-2: the log start offset), max-timestamp (-3: the record with the largest "
        "timestamp), or a timestamp in ms (the first record at or after it; partitions without one are left "
        "out).",
    )
    offsets.add_argument("--topic", metavar="T", help="the topic (default: every topic)")
    offsets.add_argument(
        "--partitions", type=_partition_list, metavar="P,Q", help="only these partitions (default: all)"
    )
    offsets.add_argument(
        "--time",
        type=_time_spec,
        default="latest",
        metavar="SPEC",
        help="earliest|latest|max-timestamp, -2|-1|-3, or a timestamp in ms (default: latest)",
    )
    offsets.add_argument(
        "--exclude-internal-topics", action="store_true", help="without --topic: leave out internal topics"
    )
    offsets.set_defaults(handler=_get_offsets)


def _add_delete_records(command: CommandFactory) -> None:
    delete = command(
        "delete-records",
        "delete a partition's records below an offset like kafka-delete-records.sh",
        "Kafka's DeleteRecords: move the partition's log start offset up to --offset (-1: the high watermark); "
        "whole segments below it are deleted, reads below it fail. Prints the new low watermark.",
    )
    delete.add_argument("--topic", required=True, metavar="T", help="the topic")
    delete.add_argument("--partition", required=True, type=_non_negative_int, metavar="P", help="the partition")
    delete.add_argument(
        "--offset", required=True, type=_delete_offset, metavar="O", help="the new log start offset, or -1"
    )
    delete.set_defaults(handler=_delete_records)


__all__ = [
    "RAY_HEAD_PORT",
    "CliState",
    "RecordFormat",
    "UsageError",
    "add_broker_commands",
    "as_text",
    "describe_lines",
    "read_state",
    "state_file",
    "terminate_ray_session",
]
