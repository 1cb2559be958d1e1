"""`raybroker status`: the cluster's health on one screen, for operators, scripts and probes.

Kafka spreads this over several tools (kafka-broker-api-versions.sh for the brokers, kafka-metadata-quorum.sh for
the controller, kafka-topics.sh `--under-replicated-partitions` / `--unavailable-partitions`,
kafka-consumer-groups.sh for the lag); `status` prints the facts of all of them at once: the brokers with their
listeners and metrics endpoints, the controller (its epoch, and which brokers hold copies of its metadata log), the
partition counts, the offline and under-replicated partitions (the first `MAX_ROWS` of each, `raybroker topics
--describe` lists them all), and each consumer group's lag per topic.

Exit codes, for probes: 0 when every partition has a running leader (under-replicated partitions and lag are
reported, not failed on), 1 when a partition is offline or no broker answers (no Ray cluster, no controller, no
broker registered), 2 for a usage error.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cluster.cli.command_support import EXIT_DATA_ERROR, EXIT_OK, add_command, connect, table_lines
from storage.errors import BrokerNotAvailableError

if TYPE_CHECKING:
    from actors.clients.cluster_status import ClusterStatus
    from actors.core.replication.leader_and_isr import LeaderAndIsr

# Rows of each partition list: a screen, not a dump (`raybroker topics --describe` has them all).
MAX_ROWS = 10
INDENT = "  "
STATUS_EPILOG = (
    "Exit codes: 0 every partition has a running leader (under-replicated partitions and lag are reported, not "
    "failed on); 1 a partition is offline, or no broker answers (no cluster, no controller, no broker running), "
    "one line on stderr; 2 usage error; 130 interrupted (Ctrl-C)."
)


def add_commands(subcommands: Any) -> None:
    status = add_command(
        subcommands,
        "status",
        "the cluster's health on one screen; exits 1 when a partition is offline",
        "Print the cluster's health: its brokers (Kafka node.id, Ray node, address, listeners, the URL Prometheus "
        "scrapes for the node's metrics), the controller's node, how many topics and partitions there are, the "
        "offline partitions (no running leader) and the under-replicated ones (fewer replicas in sync than "
        "assigned), and each consumer group's lag per topic (high watermark minus committed offset, summed over "
        "the partitions). For scripts and probes: exits 1 when a partition is offline or no broker answers.",
        epilog=STATUS_EPILOG,
    )
    status.set_defaults(handler=run_status)


def run_status(args: argparse.Namespace) -> int:
    connect(args.address)
    # Ray (through the actors): loaded only when the command runs, so the CLI starts fast.
    from actors.clients.cluster_status import read_cluster_status

    status = read_cluster_status()
    if not status.brokers:
        raise BrokerNotAvailableError("no broker is running; start one with `raybroker start`")
    for line in status_lines(status):
        print(line)
    return EXIT_DATA_ERROR if status.offline else EXIT_OK


def status_lines(status: ClusterStatus) -> list[str]:
    """The screen `raybroker status` prints for `status`."""
    lines = [
        f"Cluster: {status.cluster_id}",
        f"Controller: broker {status.broker_name(status.controller_node)} (Ray node {status.controller_node})"
        + (f", epoch {status.controller_epoch}" if status.controller_epoch >= 0 else ""),
        f"Brokers: {len(status.brokers)}",
    ]
    lines.extend(
        table_lines(
            ("BROKER", "RAY-NODE", "ADDRESS", "LISTENERS", "METRICS"),
            [
                (
                    "-" if broker.broker_id is None else str(broker.broker_id),
                    broker.node,
                    broker.address or "-",
                    ",".join(broker.listeners) or "-",
                    broker.metrics_url or "-",
                )
                for broker in status.brokers
            ],
            INDENT,
        )
    )
    lines.append(_metadata_line(status))
    offline, under_replicated = status.offline, status.under_replicated
    topics = {state.topic for state in status.partitions}
    lines.append(
        f"Topics: {len(topics)}, partitions: {len(status.partitions)}, offline: {len(offline)}, "
        f"under-replicated: {len(under_replicated)}"
    )
    for title, states in (("Offline partitions", offline), ("Under-replicated partitions", under_replicated)):
        if states:
            lines.append(f"{title}:")
            lines.extend(_partition_rows(status, states))
    lines.extend(_lag_lines(status))
    if offline:
        lines.append(f"Status: OFFLINE ({len(offline)} partition{'s' if len(offline) > 1 else ''} without a leader)")
    elif under_replicated:
        lines.append(f"Status: DEGRADED ({len(under_replicated)} under-replicated)")
    else:
        lines.append("Status: OK")
    return lines


def _metadata_line(status: ClusterStatus) -> str:
    """Where the metadata log has copies besides the controller's own, and which of them are in sync."""
    if not status.metadata_copies:
        return "Metadata log: on the controller's node only (metadata.replication.factor 1, or one broker)"
    copies = ", ".join(status.broker_name(node) for node in status.metadata_copies)
    in_sync = ", ".join(status.broker_name(node) for node in status.metadata_in_sync) or "none"
    return f"Metadata log: copies on brokers {copies}; in sync: {in_sync}"


def _partition_rows(status: ClusterStatus, states: Sequence[LeaderAndIsr]) -> list[str]:
    rows = [
        (
            state.topic,
            str(state.partition),
            status.broker_name(state.leader) if state.leader else "none",
            ",".join(map(status.broker_name, state.replicas)),
            ",".join(map(status.broker_name, state.isr)),
        )
        for state in states[:MAX_ROWS]
    ]
    lines = table_lines(("TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"), rows, INDENT)
    if len(states) > MAX_ROWS:
        lines.append(f"  ... and {len(states) - MAX_ROWS} more (raybroker topics --describe lists them all)")
    return lines


def _lag_lines(status: ClusterStatus) -> list[str]:
    if status.groups_error is not None:
        return [f"Consumer groups: unknown (the group coordinator did not answer: {status.groups_error})"]
    per_topic: dict[tuple[str, str], list[int]] = defaultdict(list)
    for row in status.lags:
        per_topic[(row.group, row.topic)].append(row.lag)
    lines = [f"Consumer groups: {len({group for group, _ in per_topic})}"]
    rows = [(group, topic, str(len(lags)), str(sum(lags))) for (group, topic), lags in sorted(per_topic.items())]
    if rows:
        lines.extend(table_lines(("GROUP", "TOPIC", "PARTITIONS", "LAG"), rows, INDENT))
    return lines
