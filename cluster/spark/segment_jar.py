"""The jar of the JVM segment reader (`cluster/spark/jvm/`, `raybroker.spark.SegmentSource`): built with Maven on
first use, cached, rebuilt when its source changes.

`segment_jar()` is the jar's path, or None when it cannot be had (no `java`/`javac`, no `mvn`, pyspark's jars not
where pyspark keeps them, or a failed build); it then says why once in the log, and `cluster.spark.kafka_source`
reads in Spark's Python workers instead. The jar lives in the download cache (`cluster.downloads.cache_root()`,
`segment-reader/`) under a name holding a hash of the Java sources, the pom and pyspark's version, so an edit or
another pyspark builds a new one and an unchanged tree costs one hash of ~30 KB. Maven runs on the cache's Maven
repository (`maven_repository()`, as the Kafka jars are fetched) and downloads only its build plugins (~5 MB, once):
Spark's classes, snappy-java, lz4-java and zstd-jni come from pyspark's own `jars/` folder (system scope). Measured
here: the first build 47 s (plugin downloads), later ones ~10 s; a cached jar costs nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from cluster.downloads import cache_root, maven_repository

logger = logging.getLogger(__name__)

SOURCE_DIR = Path(__file__).resolve().parent / "jvm"
# pyspark's jars the reader compiles against (pom.xml's `jar.<name>` properties), by file name prefix.
PYSPARK_JARS = {
    "spark-sql": "spark-sql_",
    "spark-catalyst": "spark-catalyst_",
    "spark-sql-api": "spark-sql-api_",
    "spark-unsafe": "spark-unsafe_",
    "scala-library": "scala-library-",
    "snappy-java": "snappy-java-",
    "lz4-java": "lz4-java-",
    "zstd-jni": "zstd-jni-",
}
# A build fetches Maven's plugins on first use (47 s here); beyond this something is wrong (no network).
BUILD_TIMEOUT_S = 300.0

_warned: set[str] = set()


class JarUnavailable(Exception):
    """Why the reader's jar cannot be had (logged once by `segment_jar`)."""


def segment_jar() -> Path | None:
    """The reader's jar, built now if it is not cached (see the module docstring); None, said once in the log,
    when it cannot be had."""
    try:
        return build_segment_jar()
    except (JarUnavailable, OSError) as exc:
        # OSError: the cache folder cannot be written (a full disk, permissions).
        reason = str(exc)
        if reason not in _warned:
            _warned.add(reason)
            logger.warning("Spark reads topics in Python workers (slower): %s", reason)
        return None


def build_segment_jar() -> Path:
    """The reader's jar from the cache, or built into it; `JarUnavailable` if it cannot be."""
    jars = pyspark_jars()
    jar = cache_root() / "segment-reader" / f"raybroker-spark-{source_hash(jars)}.jar"
    if jar.is_file():
        return jar
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            raise JarUnavailable(f"{tool} is not installed: cannot build the JVM segment reader")
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=jar.parent) as build:
        command = [
            "mvn",
            "-B",
            "-q",
            "-Dstyle.color=never",
            f"-Dmaven.repo.local={maven_repository()}",
            f"-Draybroker.build.directory={build}",
            "-Dmaven.test.skip=true",
            *(f"-Djar.{name}={path}" for name, path in sorted(jars.items())),
            "-f",
            str(SOURCE_DIR / "pom.xml"),
            "package",
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise JarUnavailable(f"building the JVM segment reader took over {BUILD_TIMEOUT_S:.0f} s") from None
        built = Path(build) / "raybroker-spark-1.jar"
        if done.returncode != 0 or not built.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise JarUnavailable(f"mvn could not build the JVM segment reader (exit {done.returncode}):\n{tail}")
        # Renamed into place: a concurrent build (another process) or a killed one never leaves half a jar.
        os.replace(built, jar)
    return jar


def pyspark_jars() -> dict[str, Path]:
    """pyspark's jars the reader compiles against, by pom property name."""
    try:
        import pyspark
    except ImportError as exc:
        raise JarUnavailable(f"pyspark cannot be imported: {exc}") from None
    folder = Path(pyspark.__file__).parent / "jars"
    found: dict[str, Path] = {}
    for name, prefix in PYSPARK_JARS.items():
        matches = sorted(folder.glob(f"{prefix}[0-9]*.jar"))
        if len(matches) != 1:
            raise JarUnavailable(f"expected one {prefix}*.jar in {folder}, found {len(matches)}")
        found[name] = matches[0]
    return found


def source_hash(jars: dict[str, Path]) -> str:
    """16 hex digits over the pom, every Java source (path and bytes) and the names of pyspark's jars."""
    digest = hashlib.sha256()
    for path in sorted([SOURCE_DIR / "pom.xml", *(SOURCE_DIR / "src").rglob("*.java")]):
        digest.update(str(path.relative_to(SOURCE_DIR)).encode())
        digest.update(path.read_bytes())
    for name in sorted(jars):
        digest.update(jars[name].name.encode())
    return digest.hexdigest()[:16]
