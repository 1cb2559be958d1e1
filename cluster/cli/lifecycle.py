"""`raybroker start` and `raybroker stop`, modelled on kafka-server-start.sh and kafka-server-stop.sh.

`start` without `--address` starts a local Ray head (`cluster.runtime.start_head`), records it in the state file
(`cluster.head_state`), attaches and starts this node's broker and its Kafka-protocol listener
(`cluster.protocol.listener_actor`); if either then fails to start, the head is stopped again. With `--address` it
joins that running cluster and starts this node's broker and listener there (a listener that cannot bind leaves
the broker running, reported in one line). `start` prints Kafka clients' `bootstrap.servers`, and one warning line
for a listener other machines can reach. `stop` shuts every broker down cleanly (its listeners first) and prints
the final log end offsets; it stops the Ray head too when the cluster it is connected to is the session `start`
recorded (`cluster.runtime.stop_head`: only that head's processes).

`start` also prints where Prometheus scrapes this node's metrics: its Ray node's metrics agent
(`actors.metrics.ray_export`), on the port `--metrics-port` gives the head it starts (Ray picks a free one without
it), or, with `--address`, the port the node was started with (`ray start --metrics-export-port`).

The head `start` starts keeps its GCS state in RocksDB beside the first log dir, in `--gcs-storage-path` or in
`--redis-address`'s Redis (`cluster.gcs_storage`), so that `start` run again after the head was lost resumes the
cluster. `stop` ends the cluster and discards the RocksDB folder, as does a `start` whose new cluster fails to start.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from cluster.cli.command_support import EXIT_OK, UsageError, add_command, key_value, non_negative_int
from cluster.gcs_storage import GcsStorage, default_storage
from cluster.head_state import HeadState, forget_state, read_state, write_state
from cluster.ray_auth import ensure_auth_token, token_auth_disabled
from storage.config.broker_config import BrokerConfig, load_server_properties
from storage.errors import BrokerNotAvailableError, RaybrokerError

REPO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "server.properties"


def add_commands(subcommands: Any) -> None:
    start = add_command(
        subcommands,
        "start",
        "start a broker (and a local Ray head) like kafka-server-start.sh",
        "Start a broker. Without --address: start a local Ray head daemon (`ray start --head`, 4 logical CPUs, "
        "no dashboard), attach to it and start this node's broker (the cluster's controller, this node's log "
        "manager over its log.dirs, the __consumer_offsets topic) and its Kafka-protocol listener on `listeners` "
        "(default PLAINTEXT://127.0.0.1:9092); the processes outlive this command. With --address: join that "
        "running cluster and start this node's broker on it. Prints how to connect, Kafka clients' "
        "bootstrap.servers included, and the URL Prometheus scrapes for this node's metrics.",
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
        type=key_value,
        action="append",
        metavar="KEY=VALUE",
        help="a broker property that wins over --config and --log-dirs (may be repeated)",
    )
    start.add_argument(
        "--metrics-port",
        type=non_negative_int,
        metavar="PORT",
        default=None,
        help="the port of the Ray head's metrics agent, which serves this node's broker metrics to Prometheus "
        "(`ray start --metrics-export-port`; default: a free port, printed). Not with --address: a node's port is "
        "set when its Ray node starts",
    )
    storage = start.add_mutually_exclusive_group()
    storage.add_argument(
        "--gcs-storage-path",
        type=Path,
        metavar="DIR",
        default=None,
        help="where the Ray head's GCS keeps the cluster's state in RocksDB (RAY_gcs_storage=rocksdb), so that the "
        "head started again there resumes the cluster and its worker nodes' actors live on (Ray's GCS fault "
        "tolerance; default: beside the first log dir, <dir>-ray-gcs). Not with --address",
    )
    storage.add_argument(
        "--redis-address",
        metavar="HOST:PORT",
        default=None,
        help="keep the GCS state in this Redis instead (RAY_REDIS_ADDRESS, Ray's supported backend for heads whose "
        "disk does not survive them). Not with --address",
    )
    storage.add_argument(
        "--no-gcs-fault-tolerance",
        action="store_true",
        help="keep the GCS state in memory only, as plain `ray start --head` does: losing the head loses the cluster",
    )
    start.set_defaults(handler=run_start)

    stop = add_command(
        subcommands,
        "stop",
        "stop the broker cleanly (and the Ray head `start` started)",
        "Clean shutdown of every node's broker: partitions flushed and closed, recovery-point, log-start and "
        "high-watermark checkpoints and .kafka_cleanshutdown markers written, then the controller. If "
        "`raybroker start` started the Ray head of this cluster, that head is stopped too (only its own "
        "processes: other Ray clusters on this machine are left alone). Prints the final log end offsets. "
        "Without --address or $RAY_ADDRESS it stops only that head's broker, never just any cluster 'auto' "
        "would find.",
    )
    stop.set_defaults(handler=run_stop)

    token = subcommands.add_parser(
        "auth-token",
        help="create Ray's authentication token if there is none, readable by its owner only",
        description=(
            "Make sure Ray's token authentication has a token where Ray looks for it (RAY_AUTH_TOKEN, else the file "
            "RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token): a missing file is created with 256 random bits, "
            "mode 0600 in a 0700 folder; an existing one is kept, and narrowed to its owner if others could read "
            "it. `raybroker start` does the same before it starts a Ray head. Use it before `ray up "
            "ray_cluster.yaml`, whose file_mounts copy the token to every node. Prints where the token is, never "
            "the token. Does nothing with RAY_AUTH_MODE=disabled."
        ),
        epilog="Exit codes: 0 ok, 1 the token file cannot be created.",
    )
    token.set_defaults(handler=run_auth_token)


def broker_config(args: argparse.Namespace) -> BrokerConfig:
    """server.properties, then `--log-dirs`, then `--override`s; log dirs made absolute (actors run elsewhere)."""
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


def run_start(args: argparse.Namespace) -> int:
    config = broker_config(args)
    # Ray (through the runtime): loaded only when the command runs, so the CLI starts fast.
    from cluster import runtime

    if args.address is not None:
        if args.metrics_port is not None:
            raise UsageError(
                "--metrics-port goes with starting a head; a node joined with --address exports on the port it was "
                "started with (ray start --metrics-export-port)"
            )
        if args.gcs_storage_path is not None or args.redis_address is not None or args.no_gcs_fault_tolerance:
            raise UsageError(
                "the GCS storage goes with starting a head; a node joined with --address uses its head's "
                "(start its Ray node with RAY_gcs_rpc_server_reconnect_timeout_s raised, see docs/operating.md)"
            )
        runtime.connect_to_cluster(args.address)
        return _start_broker_and_report(config, started=None)
    storage = gcs_storage(args, config)
    previous = read_state()
    if previous is not None and previous.started_head:
        if runtime.reachable(previous.address):
            raise RaybrokerError(
                f"a Ray head started by `raybroker start` is running at {previous.address}: stop it with "
                f"`raybroker stop`, or start a broker on it with `raybroker start --address {previous.address}`"
            )
        forget_state()
    resuming = storage.resumes()
    if resuming:
        print(f"Resuming the Ray cluster whose state the GCS kept in {storage.location}.")
    started = runtime.start_head(metrics_export_port=args.metrics_port, gcs_storage=storage)
    write_state(started)
    try:
        runtime.connect_to_cluster(started.address)
        return _start_broker_and_report(config, started)
    except BaseException:
        runtime.stop_head(started)
        if not resuming:
            # A cluster that never started leaves nothing to resume; a resumed one keeps its state for the next try.
            storage.discard()
        forget_state()
        raise


def gcs_storage(args: argparse.Namespace, config: BrokerConfig) -> GcsStorage:
    """The GCS storage of the head `start` starts: `--redis-address`, `--gcs-storage-path`, memory with
    `--no-gcs-fault-tolerance`, else RocksDB beside the first log dir."""
    if args.redis_address is not None:
        return GcsStorage.redis(args.redis_address)
    if args.gcs_storage_path is not None:
        return GcsStorage.rocksdb(args.gcs_storage_path)
    if args.no_gcs_fault_tolerance:
        return GcsStorage("memory")
    return default_storage(config)


def _start_broker_and_report(config: BrokerConfig, started: HeadState | None) -> int:
    # Ray (through the runtime, the actors and the listener): loaded only when the command runs, so the CLI
    # starts fast.
    from actors.clients.broker import start_broker
    from cluster import runtime
    from cluster.iceberg.translation_driver_actor import start_iceberg_driver
    from cluster.protocol.listener_actor import start_kafka_listeners

    node_id = start_broker(config)
    listeners = start_kafka_listeners(config, node_id)
    start_iceberg_driver(config)
    address = runtime.gcs_address()
    if listeners.exposed:
        exposed = ", ".join(f"{endpoint.host or '*'}:{endpoint.port}" for endpoint in listeners.exposed)
        print(
            f"raybroker: warning: the PLAINTEXT listener on {exposed} is reachable from other machines and has no "
            "authentication",
            file=sys.stderr,
        )
    if started is not None:
        print(f"Started a local Ray head at {address} (Ray session {started.session_name}).")
        print(f"The head's GCS keeps the cluster's state: {started.gcs.describe()}.")
    print(f"Broker running on Ray node {node_id}, log dirs: {', '.join(config.log_dirs)}")
    print(
        f"Kafka clients: bootstrap.servers={listeners.bootstrap_servers} "
        f"({listeners.processes} listener process{'es' if listeners.processes > 1 else ''} on this node)"
    )
    metrics = runtime.metrics_url(node_id)
    if metrics is not None:
        print(
            f"Prometheus metrics of this node: {metrics} (Ray's metrics agent; configs/prometheus.yml is a scrape "
            "config, configs/grafana-raybroker.json a dashboard)"
        )
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


def run_stop(args: argparse.Namespace) -> int:
    # Ray (through the runtime and the actors): loaded only when the command runs, so the CLI starts fast.
    from actors.clients.broker import stop_broker
    from cluster import runtime

    state = read_state()
    own_head_runs = state is not None and state.started_head and runtime.reachable(state.address)
    if not (runtime.is_attached() or own_head_runs or args.address or os.environ.get("RAY_ADDRESS")):
        # `auto` would pick any Ray cluster of this machine, other programs' embedded ones included, and stop
        # the broker there: shutting a broker down takes a named target.
        if state is not None:
            forget_state()
        raise UsageError(
            "no Ray head started by `raybroker start` is running here; name the cluster whose broker to stop "
            "with --address ADDR (or --address auto)"
        )
    try:
        runtime.connect_to_cluster(args.address)
    except BrokerNotAvailableError:
        if state is not None and not own_head_runs:
            forget_state()
        raise
    ours = state if state is not None and state.started_head and state.session_name == runtime.session_name() else None
    try:
        end_offsets = stop_broker()
    except BrokerNotAvailableError as exc:
        if ours is None:
            raise
        print(f"No broker was running ({exc}).", file=sys.stderr)
    else:
        print("Broker stopped cleanly (checkpoints and .kafka_cleanshutdown markers written).")
        print("Final log end offsets:")
        for name in sorted(end_offsets, key=_partition_sort_key):
            print(f"    {name}\t{end_offsets[name]}")
    if ours is not None:
        runtime.stop_head(ours)
        # A clean stop ends the cluster: the next `start` begins a new one rather than reloading this one's actors.
        ours.gcs.discard()
        forget_state()
        print(f"Stopped the Ray head at {ours.address} (Ray session {ours.session_name}).")
    return EXIT_OK


def run_auth_token(args: argparse.Namespace) -> int:
    path = ensure_auth_token()
    if path is not None:
        print(f"Ray's auth token: {path} (readable by its owner only)")
    elif token_auth_disabled():
        print("Ray's token authentication is disabled (RAY_AUTH_MODE=disabled): no token needed")
    else:
        print("Ray's auth token is the value of RAY_AUTH_TOKEN")
    return EXIT_OK


def _partition_sort_key(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")
    return (topic, int(partition)) if partition.isdigit() else (name, -1)
