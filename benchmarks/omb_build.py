"""The OpenMessaging Benchmark (OMB) built from its source, for `benchmarks/bench_omb.py`.

OMB is not published to Maven Central and the machines that run the benchmarks reach no other host, so its source
is kept here: `benchmarks/java/openmessaging-benchmark-<commit>.tar.gz` is `git archive` of the pinned commit
`OMB_COMMIT` of github.com/openmessaging/benchmark, reduced to what its Kafka driver runs on (the root pom, LICENSE,
`driver-api`, `driver-kafka` with its driver profiles, `benchmark-framework`, the 1 KiB payload and the
`1-topic-*-partitions-1kb` workloads).

`omb_classpath()` builds it once with Maven into `omb-<commit>/` of the download cache (`cluster.downloads`, whose
Maven repository the Kafka jars share) and answers the classpath of OMB's framework, its Kafka driver (stock
`kafka-clients` 3.6.1) and their dependencies; later calls find the build there (~1 minute the first time with
Maven's repository warm, a few more with it empty). Two edits to OMB's poms before the build, both because
`benchmark-framework` lists every driver as a dependency (it loads the one a driver yaml names by class name) and
`driver-bookkeeper`'s `distributedlog-core-shaded` has a parent pom that is not on Maven Central, so the full build
fails there: the root pom's modules are cut to the three above, and the framework's dependencies on the other
drivers are removed. OMB's source checks (spotless, license headers, checkstyle, spotbugs) and tests are skipped.
`OmbUnavailable` says which step failed and why.
"""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path

from benchmarks.kafka_broker import KafkaUnavailable, run_maven
from cluster.downloads import cache_root

OMB_COMMIT = "85599891321cafa2fb7065a63f009b4bb5374288"
SOURCE = Path(__file__).parent / "java" / f"openmessaging-benchmark-{OMB_COMMIT[:7]}.tar.gz"
# The folder the archive unpacks to.
ARCHIVE_ROOT = "openmessaging-benchmark"
# The modules the Kafka driver needs: the framework last, as Maven's reactor orders them.
MODULES = ("driver-api", "driver-kafka", "benchmark-framework")
FRAMEWORK_JAR = "benchmark-framework/target/benchmark-framework-0.0.1-SNAPSHOT.jar"
# Written by the framework pom's own `dependency:build-classpath` execution: its dependencies' jars, absolute.
CLASSPATH_FILE = "benchmark-framework/target/classpath.txt"
SKIPPED_CHECKS = (
    "-DskipTests",
    "-Dspotless.check.skip",
    "-Dspotless.apply.skip",
    "-Dlicense.skip",
    "-Dcheckstyle.skip",
    "-Dspotbugs.skip",
    "-Djacoco.skip",
)


class OmbUnavailable(KafkaUnavailable):
    """OMB could not be unpacked or built here (the message says which step and why)."""


def omb_home() -> Path:
    """The source tree of the pinned commit in the download cache, built there once."""
    return cache_root() / f"omb-{OMB_COMMIT[:12]}" / ARCHIVE_ROOT


def omb_classpath() -> list[Path]:
    """The jars running OMB's LocalWorker with its Kafka driver: built on first use (see the module docstring)."""
    home = omb_home()
    marker = home.parent / "complete"
    if not marker.exists():
        _build(home)
        marker.write_text(OMB_COMMIT + "\n")
    listed = (home / CLASSPATH_FILE).read_text().strip().split(":")
    jars = [home / FRAMEWORK_JAR, *(Path(entry) for entry in listed if entry)]
    missing = [str(jar) for jar in jars if not jar.exists()]
    if missing:
        raise OmbUnavailable(f"OMB's classpath lists missing jars {missing[:3]}; delete {home.parent} to build again")
    return jars


def workload_file(name: str) -> Path:
    """One of OMB's workload yamls (`1-topic-100-partitions-1kb`) in the built tree."""
    return omb_home() / "workloads" / f"{name}.yaml"


def driver_file(name: str) -> Path:
    """One of OMB's Kafka driver profiles (`kafka-throughput`, `kafka-exactly-once`) in the built tree."""
    return omb_home() / "driver-kafka" / f"{name}.yaml"


def payload_file() -> Path:
    """OMB's 1 KiB payload, the workloads' `payloadFile`."""
    return omb_home() / "payload" / "payload-1Kb.data"


def _build(home: Path) -> None:
    """Unpacks the archive into a fresh `home`, cuts the poms to `MODULES` and packages them with Maven."""
    if not SOURCE.exists():
        raise OmbUnavailable(f"OMB's source archive {SOURCE} is missing")
    shutil.rmtree(home.parent, ignore_errors=True)
    home.parent.mkdir(parents=True)
    with tarfile.open(SOURCE) as archive:
        archive.extractall(home.parent, filter="data")
    _keep_modules(home / "pom.xml")
    _drop_other_drivers(home / "benchmark-framework" / "pom.xml")
    run_maven(
        ["-f", str(home / "pom.xml"), "-pl", "benchmark-framework", "-am", *SKIPPED_CHECKS, "package"],
        f"OpenMessaging Benchmark {OMB_COMMIT[:7]} (built from source with its dependencies from Maven Central)",
        home / "benchmark-framework" / "target",
    )
    if not (home / FRAMEWORK_JAR).exists() or not (home / CLASSPATH_FILE).exists():
        raise OmbUnavailable(f"Maven built no {FRAMEWORK_JAR} and {CLASSPATH_FILE} in {home}")


def _keep_modules(pom: Path) -> None:
    """The root pom's `<modules>` reduced to `MODULES`."""
    text = pom.read_text()
    listed = "".join(f"        <module>{module}</module>\n" for module in MODULES)
    reduced, count = re.subn(r"<modules>.*?</modules>", f"<modules>\n{listed}    </modules>", text, flags=re.S)
    if count != 1:
        raise OmbUnavailable(f"{pom} has {count} <modules> sections, expected 1")
    pom.write_text(reduced)


def _drop_other_drivers(pom: Path) -> None:
    """Removes every `<dependency>` on an OMB driver other than `driver-api` and `driver-kafka`."""

    def kept(match: re.Match[str]) -> str:
        artifact = re.search(r"<artifactId>(driver-[^<]*)</artifactId>", match.group(0))
        return match.group(0) if artifact is None or artifact.group(1) in MODULES else ""

    text = pom.read_text()
    pom.write_text(re.sub(r"[ \t]*<dependency>.*?</dependency>\s*", kept, text, flags=re.S))
