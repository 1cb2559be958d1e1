"""Apache Kafka's own command-line tools, run against a broker the way their `bin/*.sh` scripts run them: the tool's
main class on the classpath of Kafka's jars and `kafka-tools` (`benchmarks.kafka_broker` fetches both from Maven
Central on first use). A machine without them fails the test in CI and skips it elsewhere (`skip_or_fail`).
Each run starts a JVM: ~2 s."""

from __future__ import annotations

import functools
import os
import subprocess

from benchmarks.kafka_broker import KAFKA_VERSION, KafkaUnavailable, kafka_jars, kafka_tools_jar
from tests.conftest import skip_or_fail

TOOL_TIMEOUT_S = 120
# What a tool's JVM prints about its own logging (SLF4J, log4j, their stack frames): it depends on the machine (an
# empty HOME, a missing log4j config), never on the broker asked.
JVM_NOISE = ("SLF4J", "log4j:", "\tat ", "ERROR StatusLogger", "\t... ")
CONFIGS = "kafka.admin.ConfigCommand"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
FEATURES = "org.apache.kafka.tools.FeatureCommand"
LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
REASSIGN_PARTITIONS = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


@functools.cache
def _classpath(version: str) -> str:
    try:
        return os.pathsep.join(str(jar) for jar in [*kafka_jars(version), kafka_tools_jar(version)])
    except KafkaUnavailable as exc:
        skip_or_fail(f"Apache Kafka {version}'s tools are not available here: {exc}")


def run_kafka_tool(
    tool: str, bootstrap: str, *arguments: str, version: str = KAFKA_VERSION
) -> subprocess.CompletedProcess[str]:
    """Kafka's tool `tool` (a main class) of Kafka `version` with `--bootstrap-server bootstrap` and `arguments`,
    run to its end."""
    return subprocess.run(
        ["java", "-cp", _classpath(version), tool, "--bootstrap-server", bootstrap, *arguments],
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
    )


def printed_lines(ran: subprocess.CompletedProcess[str]) -> list[str]:
    """What a tool printed, its output then its errors, without blank lines and `JVM_NOISE`."""
    return [
        line for line in f"{ran.stdout}\n{ran.stderr}".splitlines() if line.strip() and not line.startswith(JVM_NOISE)
    ]
