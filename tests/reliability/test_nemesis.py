"""The nemesis run: three Ray hosts on this machine (the head, and two workers in network namespaces of their own),
each with a broker; topics with three replicas and `min.insync.replicas=2`; clients that write, transform, tail and
commit (`tests.reliability.nemesis.workloads`) while the nemesis pauses whole nodes and brokers, cuts hosts off the
head and off each other, and kills nodes (`tests.reliability.nemesis.faults`). Afterwards the checker
(`tests.reliability.nemesis.checker`) compares the history with what the cluster holds: no acknowledged write lost, no
duplicate, no read of data later truncated, no aborted read, no torn transaction, every input transformed exactly
once per transformer, no committed offset lost or past its data, no transaction left open, replicas identical.

Quick mode (in the suite): one fault of each kind but kills, aimed at the roles that matter (the coordinator's node
paused, a leader's host cut from the head, a leader's broker paused, two workers cut from each other); node kills are
the quick mode of `tests/actors/test_zz_replication.py`, and the long mode's too.
`RAYBROKER_RELIABILITY=long`: faults of random kinds and roles for `RAYBROKER_NEMESIS_MINUTES` (30) minutes.
Each run writes its history (`history.jsonl`) and the checker's summary (`summary.json`) into the test's temp dir,
or into `RAYBROKER_NEMESIS_DIR` if set.

Needs root, iproute2 and nftables (`skip_or_fail` names what is missing). It shuts the session's Ray down for its own
cluster (`OWNS_RAY`), and removes its namespaces and bridge, and every process it started in them, at the end."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

import pytest

from actors.calls import call
from actors.clients.admin import Admin
from tests.actors.support import release_session_ray
from tests.conftest import skip_or_fail
from tests.reliability.modes import LONG
from tests.reliability.nemesis import faults, final_state, workloads
from tests.reliability.nemesis.checker import check
from tests.reliability.nemesis.history import History, longest_ack_gaps
from tests.reliability.nemesis.hosts import Hosts
from tests.reliability.nemesis.network import Network, missing_tools

MINUTES = float(os.environ.get("RAYBROKER_NEMESIS_MINUTES", "30"))
# The long mode's faults, plus the start, the end and the check: pytest's 600 s would stop it midway.
pytestmark = [pytest.mark.ray, pytest.mark.reliability, pytest.mark.timeout((MINUTES * 60 if LONG else 0) + 600)]
OWNS_RAY = True

# Ray declares a node dead after ~1 s of missed health checks (its default is ~15 s), so that a pause or a cut
# outlives the deadline within a short run.
HEALTH_CHECKS = {"health_check_period_ms": 300, "health_check_timeout_ms": 300, "health_check_failure_threshold": 3}
BROKER_SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "3",
    "log.initial.task.delay.ms": "200",
    "replica.lag.time.max.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    "replica.fetch.backoff.ms": "100",
    "leader.imbalance.check.interval.seconds": "5",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
SOURCE, SINK, PARTITIONS = "nemesis-in", "nemesis-out", 3
ABANDONED_TIMEOUT_MS = 4000
QUICK_SCHEDULE = [
    faults.Fault("pause_node", "coordinator", 1.0),
    faults.Fault("cut_from_head", "leader", 2.0),
    faults.Fault("pause_broker", "leader", 6.0),
    faults.Fault("cut_from_peer", "any", 4.0),
]


def _output_dir(tmp_path: Path) -> Path:
    chosen = os.environ.get("RAYBROKER_NEMESIS_DIR")
    directory = Path(chosen) if chosen else tmp_path
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _high_watermarks(topic: str) -> dict[tuple[str, int], int]:
    from actors.server.partition_lookup import leader_replica

    ends = {}
    for partition in range(PARTITIONS):
        handle, _ = leader_replica(topic, partition)
        ends[(topic, partition)] = int(call(handle.offsets.remote(), timeout_s=30)[1])
    return ends


def test_no_anomaly_under_pauses_partitions_and_kills(tmp_path: Path) -> None:
    missing = missing_tools()
    if missing:
        skip_or_fail(f"the nemesis needs {', '.join(missing)}")
    release_session_ray()
    out = _output_dir(tmp_path)
    rng = random.Random(int(os.environ.get("RAYBROKER_NEMESIS_SEED", "0")) or None)
    network = Network(hosts=2).create()
    hosts = Hosts(network, tmp_path / "disks", BROKER_SETTINGS, HEALTH_CHECKS)
    history = History()
    try:
        hosts.start()
        for topic in (SOURCE, SINK):
            Admin().create_topic(topic, PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        from cluster.protocol.listener_actor import start_kafka_listeners
        from storage.config.broker_config import BrokerConfig

        settings = {key: value for key, value in BROKER_SETTINGS.items() if key.startswith("transaction.")}
        config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": "0", **settings})
        bootstrap = start_kafka_listeners(config, hosts.head).bootstrap_servers

        stop_writes, stop_rest = threading.Event(), threading.Event()
        ends: dict[tuple[str, int], int] = {}
        all_partitions = [(topic, p) for topic in (SOURCE, SINK) for p in range(PARTITIONS)]
        threads = [
            workloads.start(workloads.write, history, "w0", SOURCE, PARTITIONS, stop_writes),
            workloads.start(workloads.write, history, "w1", SOURCE, PARTITIONS, stop_writes),
        ]
        others = [
            workloads.start(workloads.transform, history, "tp", SOURCE, SINK, stop_rest, ends, PARTITIONS),
            workloads.start(
                workloads.transform_with_confluent, history, "tc", bootstrap, SOURCE, SINK, stop_rest, ends, PARTITIONS
            ),
            workloads.start(workloads.tail, history, "reader", all_partitions, stop_rest),
            workloads.start(
                workloads.commit_offsets, history, "group", [(SOURCE, p) for p in range(PARTITIONS)], stop_rest
            ),
        ]
        # Left open, as by a client that crashed: the coordinator aborts it on its timeout.
        abandoned = workloads.start(workloads.abandon, history, "abandoned", SINK, PARTITIONS, ABANDONED_TIMEOUT_MS)
        abandoned.join(timeout=90)
        time.sleep(3)
        if LONG:
            deadline = time.monotonic() + MINUTES * 60
            while time.monotonic() < deadline:
                for fault in faults.random_schedule(rng, 1, (1.0, 8.0)):
                    faults.inject(hosts, history, fault, [SOURCE, SINK], rng)
                time.sleep(rng.uniform(2, 10))
        else:
            for fault in QUICK_SCHEDULE:
                faults.inject(hosts, history, fault, [SOURCE, SINK], rng)
                time.sleep(1)
        stop_writes.set()
        for thread in threads:
            thread.join(timeout=120)
            assert not thread.is_alive(), f"{thread.name} did not flush within 120 s"
        ends.update(_high_watermarks(SOURCE))
        stop_rest.set()
        for thread in others:
            thread.join(timeout=180)
        stuck = [thread.name for thread in others if thread.is_alive()]
        final_state.settle({SOURCE: PARTITIONS, SINK: PARTITIONS}, timeout_s=90)
        final = final_state.collect({SOURCE: PARTITIONS, SINK: PARTITIONS}, ["group", "tp", "tc"])
    finally:
        history.write(out / "history.jsonl")
        try:
            hosts.shutdown()
        finally:
            network.remove()
    anomalies = check(history, final, {"tp": SOURCE, "tc": SOURCE})
    summary = {
        "anomalies": anomalies.counts(),
        "acknowledged": len(history.events("ack")),
        "transactions": len(history.events("txn")),
        "reads": len(history.events("read")),
        "faults": [e["action"] for e in history.events("fault")],
        "client_errors": len(history.events("error")) + len(history.events("fail")),
        # Per writer: the longest wait between two acknowledgements, and when in the run it began (see `faults`).
        "longest_ack_gaps_s": longest_ack_gaps(history),
        "stuck": stuck,
        # Each partition at the end: high watermark, last stable offset, records held (the checker's oracle).
        "final": {
            f"{t}-{p}": [log.high_watermark, log.last_stable_offset, len(log.records)]
            for (t, p), log in final.logs.items()
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    assert not stuck, f"workloads that did not finish: {stuck} ({out})"
    assert anomalies.ok, f"{anomalies.report()}\n(history and summary in {out})"
    assert summary["acknowledged"] > 0 and summary["transactions"] > 0 and summary["reads"] > 0, summary
