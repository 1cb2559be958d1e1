"""Every example of the README and of `docs/*.md` runs as written, so none can drift from the code.

Each document's fenced ```python and ```sh blocks are examples (```text blocks are shown, not run). The README's
first two ```sh blocks (install and run the demo, install and run the tests) set a machine up and are not run
here. Each other block is run by the test that `EXAMPLES` names for it (keyed by its document and its first
line); a block without a test, or a test whose block is gone, fails `test_every_example_has_a_test`.

How a block runs:
- Python is `exec`uted in this process, on this session's embedded Ray (`ray_session`) where it needs Ray.
  A top-level `print(...)  # expected` line is checked: the printed lines include the expected ones, in order.
- Shell runs under `bash -eu` from the repository root, with this interpreter's `bin/` first on PATH. A block
  that starts a broker with `raybroker start` gets its own local Ray head, which its `raybroker stop` ends (the
  test stops it too if the block failed before). A `$ command` line followed by output lines is checked: the
  command's output begins with the lines shown, `...` standing for the rest.
- The only change made to a block: the paths under `/tmp/rb/` and `/tmp/demo/` (`TMP_PREFIXES`) are rewritten
  to this test's `tmp_path`, so running the tests neither reads nor clobbers what a reader left there. The Spark
  examples are the exception, and say how they differ.
- What an example reads must exist: fixtures create it first (the `page-views` topic of the Spark examples).

This module lives under `tests/cluster/` to share that package's Spark session (the `spark` fixture of
`tests/cluster/conftest.py`): a session of its own would add ~25 s per Spark example. Also here: every relative
link of the documents names a file that exists.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import socket
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.cluster.cli_shell import REPO_ROOT, cli_env, require_free_head_port, run_shell
from tests.conftest import skip_or_fail

README = REPO_ROOT / "README.md"
DOCUMENTS = [README, REPO_ROOT / "CONTRIBUTING.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SETUP_BLOCKS = 2  # the README's install-and-run commands at the top, run by a person or CI, not by a test
TMP_PREFIXES = ("/tmp/rb/", "/tmp/demo/")
BLOCK = re.compile(r"^```(python|sh)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")
EXPECTED_PRINT = re.compile(r"^print\(.*\)\s+# (.+)$")
PAGE_VIEWS = [{"user": f"u{i % 7}", "page": f"/p{i % 3}", "latency_ms": i % 50} for i in range(300)]


@dataclass(frozen=True)
class Example:
    document: str  # relative to the repository root
    language: str
    line: int  # 1-based line of the document where the code starts
    code: str

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0]

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def document_examples(path: Path) -> list[Example]:
    text = path.read_text(encoding="utf-8")
    name = str(path.relative_to(REPO_ROOT))
    examples = [
        Example(name, match.group(1), text.count("\n", 0, match.start(2)) + 1, match.group(2))
        for match in BLOCK.finditer(text)
    ]
    if path != README:
        return examples
    shell = [index for index, example in enumerate(examples) if example.language == "sh"]
    setup = set(shell[:SETUP_BLOCKS])
    return [example for index, example in enumerate(examples) if index not in setup]


def all_examples() -> list[Example]:
    return [example for path in DOCUMENTS if path.exists() for example in document_examples(path)]


# The test of each example, by its document and the first line of its block.
EXAMPLES = {
    ("README.md", "raybroker start --config configs/server.properties"): "test_cli_broker_example",
    ("README.md", "from actors import Admin, Broker, Consumer, Producer, start_broker"): "test_python_broker_example",
    ("README.md", "from confluent_kafka import Consumer, Producer"): "test_kafka_clients_example",
    ("README.md", "from cluster.spark.session import get_spark, stop_spark"): "test_spark_example",
    ("docs/clients.md", "import ray"): "test_ray_data_kafka_example",
    ("docs/clients.md", "from ray.serve.schema import TaskProcessorConfig"): "test_serve_task_queue_example",
    ("docs/performance.md", "python -m benchmarks"): "test_benchmarks_example",
    ("docs/ray-data.md", "import pyarrow as pa"): "test_ray_data_example",
    ("docs/iceberg.md", "from cluster.spark.iceberg_runtime import"): "test_iceberg_spark_example",
    (
        "docs/security.md",
        "mkdir -p /tmp/rb/tls   # then a test CA (pip install trustme): client.pem (the CA), server.key, server.pem",
    ): "test_security_example",
    ("docs/spark.md", "raybroker sql 'SELECT page, count(*) AS views FROM `page-views` GROUP BY page'"): (
        "test_sql_example"
    ),
    ("docs/storage-format.md", "from storage import Log, LogConfig, RecordBatchBuilder, CompressionType"): (
        "test_storage_example"
    ),
    ("docs/storage-format.md", "$ raybroker dump-log --print-data-log"): "test_dump_log_example",
}


def matches(key: tuple[str, str], candidate: Example) -> bool:
    document, prefix = key
    return candidate.document == document and candidate.first_line.startswith(prefix)


def example(test_name: str) -> Example:
    (key,) = [key for key, name in EXAMPLES.items() if name == test_name]
    (found,) = [candidate for candidate in all_examples() if matches(key, candidate)]
    return found


# A test's broker serves Kafka clients on a free loopback port, not on Kafka's 9092, which another program may hold.
ANY_FREE_LISTENER = "--override listeners=PLAINTEXT://127.0.0.1:0"


def rewritten(code: str, tmp_path: Path) -> str:
    for prefix in TMP_PREFIXES:
        code = code.replace(prefix, f"{tmp_path}{prefix.removeprefix('/tmp')}")
    return code.replace("raybroker start ", f"raybroker start {ANY_FREE_LISTENER} ")


def run_python(block: Example, tmp_path: Path, code: str | None = None) -> list[str]:
    """Executes the block (or `code` derived from it) in a fresh namespace; returns the lines it printed."""
    out = io.StringIO()
    source = rewritten(block.code if code is None else code, tmp_path)
    with contextlib.redirect_stdout(out):
        exec(compile(source, block.where, "exec"), {"__name__": "docs_example"})
    return out.getvalue().splitlines()


def check_expected_prints(code: str, printed: list[str]) -> None:
    expected = [match.group(1) for line in code.splitlines() if (match := EXPECTED_PRINT.match(line))]
    remaining = iter(printed)
    for line in expected:
        assert any(candidate == line for candidate in remaining), (line, printed)


def shown_counts(printed: list[str]) -> dict[str, int]:
    """The rows of a two-column table as Spark's `show()` prints it (`|page|count|`), header left out."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in printed if line.count("|") == 3]
    return {name: int(count) for name, count in rows[1:]}


def views_per_page(views: list[dict[str, Any]]) -> dict[str, int]:
    return {page: sum(view["page"] == page for view in views) for page in sorted({view["page"] for view in views})}


# --- the list of examples ------------------------------------------------------------------------------


def test_every_example_has_a_test() -> None:
    examples = all_examples()
    untested = [found.where for found in examples if not any(matches(key, found) for key in EXAMPLES)]
    without_block = [key for key in EXAMPLES if sum(matches(key, found) for found in examples) != 1]
    assert untested == []
    assert without_block == []
    assert len(examples) == len(EXAMPLES)
    module = sys.modules[__name__]
    assert all(callable(getattr(module, name, None)) for name in EXAMPLES.values())


def test_only_the_tmp_paths_are_rewritten() -> None:
    """The examples' absolute paths all lie under `TMP_PREFIXES`, which is all the tests change."""
    for found in all_examples():
        for path in re.findall(r"(?<![\w.])/(?:tmp|data|var|home)/[\w./-]*", found.code):
            assert path.startswith(TMP_PREFIXES), (found.where, path)


def test_every_relative_link_names_a_file_that_exists() -> None:
    broken = []
    for path in DOCUMENTS:
        for target in LINK.findall(path.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("#"):
                continue
            linked = (path.parent / target.partition("#")[0]).resolve()
            if not linked.exists():
                broken.append(f"{path.relative_to(REPO_ROOT)}: {target}")
    assert broken == []


# --- examples without Ray -------------------------------------------------------------------------------


def test_storage_example(tmp_path: Path) -> None:
    block = example("test_storage_example")
    printed = run_python(block, tmp_path)
    check_expected_prints(block.code, printed)
    assert (tmp_path / "demo" / "orders-0" / "00000000000000000000.log").stat().st_size > 0


def test_serve_task_queue_example(tmp_path: Path) -> None:
    """The Serve task processor's configuration (its run on a Serve app is `tests/cluster/serve`'s)."""
    block = example("test_serve_task_queue_example")
    check_expected_prints(block.code, run_python(block, tmp_path))


def test_dump_log_example() -> None:
    block = example("test_dump_log_example")
    lines = block.code.splitlines()
    assert lines[0].startswith("$ ")
    expected = lines[1:]
    if expected and expected[-1] == "...":
        expected = expected[:-1]
    result = run_shell(lines[0].removeprefix("$ "), timeout_s=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[: len(expected)] == expected


def test_benchmarks_example() -> None:
    """`python -m benchmarks` takes ~3.5 min, so it is not run here (tests/test_benchmarks.py runs it with
    `--quick --only ...`); the options the block names must be the command's own."""
    block = example("test_benchmarks_example")
    command, _, comment = block.code.strip().partition("#")
    assert command.split() == ["python", "-m", "benchmarks"]
    usage = run_shell("python -m benchmarks --help", timeout_s=60)
    assert usage.returncode == 0, usage.stderr
    for option in re.findall(r"--[a-z][a-z-]*", comment):
        assert option in usage.stdout, option


# --- examples on this session's Ray ---------------------------------------------------------------------


@pytest.fixture
def no_broker(ray_session: None) -> Iterator[None]:
    """No broker runs before the example starts its own, and none is left after it."""
    from tests.conftest import _stop_running_broker

    _stop_running_broker()
    yield
    _stop_running_broker()


@pytest.mark.ray
def test_python_broker_example(no_broker: None, tmp_path: Path) -> None:
    block = example("test_python_broker_example")
    printed = run_python(block, tmp_path)
    assert printed, "the consumer printed no record"
    assert (tmp_path / "rb" / "a").is_dir() and (tmp_path / "rb" / "b").is_dir()


@pytest.fixture(scope="module")
def page_views(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> Iterator[list[dict[str, Any]]]:
    """A broker whose topic `page-views` holds msgpack page-view events, as `raybroker demo` writes them: one for
    both Spark examples, which run one after the other. Spark's planning and its Python workers keep a partition's
    actor handle for the life of their process (`cluster.records.offset_ranges.partition_handle`), so a broker
    restarted under the running session would leave them with handles of actors that are gone."""
    from actors import Admin, Producer
    from tests.conftest import _stop_running_broker

    start_test_broker(log_dirs_count=1)
    Admin().create_topic("page-views", partitions=2)
    with Producer() as producer:
        producer.send_many("page-views", PAGE_VIEWS).result()
    yield PAGE_VIEWS
    _stop_running_broker()


@pytest.mark.ray
@pytest.mark.spark
def test_spark_example(spark: Any, page_views: list[dict[str, Any]], tmp_path: Path) -> None:
    """Run on the package's Spark session, which the example's `get_spark()` returns as it returns any running
    session; its closing `stop_spark()` is left to that session's fixture, which stops it after the package."""
    from cluster.spark.session import active_session

    block = example("test_spark_example")
    body, _, closing = block.code.rstrip("\n").rpartition("\n")
    assert closing == "stop_spark()"
    printed = run_python(block, tmp_path, body + "\nprint(next_start)\n")
    assert shown_counts(printed) == views_per_page(page_views)
    assert sum(json.loads(printed[-1])["page-views"].values()) == len(page_views)
    assert active_session() is spark


@pytest.mark.ray
@pytest.mark.spark
def test_iceberg_spark_example(spark: Any, page_views: list[dict[str, Any]], tmp_path: Path) -> None:
    """On the package's Spark session and the `page_views` broker, with the translation driver started (its catalog
    under `tmp_path`) and a topic `orders` kept as a `key_value` table: the first `show` prints the topic's records,
    the second the table's snapshot."""
    from actors import Admin, Producer
    from cluster.iceberg.translation_driver_actor import iceberg_driver_status, start_iceberg_driver
    from storage.config.broker_config import BrokerConfig

    start_iceberg_driver(BrokerConfig.from_properties({"log.dirs": str(tmp_path / "meta")}), poll_interval_s=0.2)
    Admin().create_topic("orders", 2, config={"iceberg.mode": "key_value", "iceberg.target.lag.ms": "300"})
    with Producer() as producer:
        producer.send_many("orders", [{"order": i} for i in range(5)]).result()
    deadline = time.monotonic() + 60
    while sum(p.table_offset for status in iceberg_driver_status("orders") for p in status.partitions) < 5:
        assert time.monotonic() < deadline, iceberg_driver_status("orders")
        time.sleep(0.2)
    records, snapshots = shown_tables(run_python(example("test_iceberg_spark_example"), tmp_path))
    assert len(records) == 1 + 5 and {"partition", "offset", "key", "value"} <= set(records[0])
    assert len(snapshots) == 2 and "snapshot_id" in snapshots[0]


def shown_tables(printed: list[str]) -> list[list[list[str]]]:
    """The tables Spark's `show()` printed, each a list of rows (its header first) of cells."""
    tables: list[list[list[str]]] = []
    borders = 0
    for line in printed:
        if line.startswith("+"):
            borders += 1
            if borders % 3 == 1:
                tables.append([])
        elif line.startswith("|"):
            tables[-1].append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return tables


@pytest.mark.ray
@pytest.mark.spark
def test_sql_example(spark: Any, page_views: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    """The block's command line, given to the `raybroker` entry point (`cluster.cli.main.main`) in this process,
    against this session's broker and Spark session: a process of its own would start Ray's driver and a RayDP
    session of its own (~30 s) for nothing the CLI broker example does not already cover."""
    from cluster.cli.main import main

    block = example("test_sql_example")
    (command,) = block.code.strip().splitlines()
    program, *arguments = shlex.split(command)
    assert program == "raybroker" and arguments[0] == "sql"
    code = main(arguments)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert shown_counts(printed.out.splitlines()) == views_per_page(page_views)


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")  # Ray Data reads its own deprecated fields
def test_ray_data_example(page_views: list[dict[str, Any]], tmp_path: Path) -> None:
    block = example("test_ray_data_example")
    printed = run_python(block, tmp_path)
    # The stream's print is indented in its loop: every expected print is checked, in order.
    unindented = "\n".join(line.strip() for line in block.code.splitlines())
    check_expected_prints(unindented, printed)
    slow = [view for view in page_views if view["latency_ms"] > 40]
    expected = [match.group(1) for line in unindented.splitlines() if (match := EXPECTED_PRINT.match(line))]
    assert expected == [str(len(page_views)), str(len(slow)), str(len(slow))], "the page's numbers are the data's"


# --- examples that start a broker with its own Ray head -------------------------------------------------


@pytest.fixture
def free_head_port() -> Iterator[None]:
    """`raybroker start` takes Ray's default port and records its head in the CLI's state file; both must be
    free. Whatever the example leaves running is stopped afterwards."""
    from cluster.head_state import read_state, state_file
    from cluster.runtime import stop_head

    if state_file().exists():
        skip_or_fail(f"a `raybroker start` state file exists ({state_file()}): a real head may be running")
    require_free_head_port()
    yield
    state = read_state()
    if state is not None and state.started_head:
        run_shell("raybroker stop", timeout_s=120)
        stop_head(state)
        state_file().unlink(missing_ok=True)


def processes_with_home(home: Path) -> list[str]:
    """The command lines of the processes whose environment has `HOME=home`: what a shell with that HOME started,
    and what those started (Ray's daemons and workers inherit it)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("HOME") == str(home):
                found.append(" ".join(proc.info["cmdline"] or ())[:120])
    return found


@pytest.mark.ray
def test_cli_broker_example(free_head_port: None, tmp_path: Path) -> None:
    """The block as a reader runs it on a machine that never ran Ray: HOME a new empty folder, no XDG folders and no
    Ray variables. `raybroker start` creates Ray's token (readable by its owner only, never printed) and a head with
    token authentication; each command is a process of its own that attaches to it; `raybroker stop` leaves a clean
    shutdown in every log dir and no process of that head behind (other Ray clusters, like this test session's, keep
    running). Slow (~25 s): the one test of a real head started by the CLI."""
    block = example("test_cli_broker_example")
    lines = block.code.strip().splitlines()
    assert lines[-1].startswith("raybroker stop")
    home = tmp_path / "home"
    home.mkdir()
    fresh = {key: value for key, value in cli_env().items() if not key.startswith(("XDG_", "RAY_AUTH"))}
    fresh["HOME"] = str(home)
    result = run_shell(rewritten(block.code, tmp_path), env=fresh)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert "Started a local Ray head at " in result.stdout
    assert "hello" in result.stdout and "world" in result.stdout
    for log_dir in ("cli-a", "cli-b"):
        assert (tmp_path / "rb" / log_dir / ".kafka_cleanshutdown").is_file()
    token = home / ".ray" / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert token.read_text(encoding="ascii") not in result.stdout + result.stderr
    assert processes_with_home(home) == []


@pytest.mark.ray
def test_security_example(free_head_port: None, tmp_path: Path) -> None:
    """The SASL_SSL broker set up from nothing: users, an ACL, and a client that logs in and writes; no password
    the example typed reaches any file of the broker (the password file the reader wrote aside). Slow (~15 s) as
    the CLI example is: a real Ray head and a process per command."""
    block = example("test_security_example")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = block.code
    for prefix in TMP_PREFIXES:
        code = code.replace(prefix, f"{tmp_path}{prefix.removeprefix('/tmp')}")
    result = run_shell(code.replace("127.0.0.1:9094", f"127.0.0.1:{port}"))
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert "delivered" in result.stdout.splitlines()
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in result.stdout
    for path in (tmp_path / "rb").rglob("*"):
        if path.is_file() and path.name != "admin.txt":
            data = path.read_bytes()
            assert b"admin-pa55" not in data and b"alice-pa55" not in data, path


# The address the Kafka-clients example connects to, as `raybroker start --override listeners=...` would print it.
KAFKA_EXAMPLE_HOST, KAFKA_EXAMPLE_PORT = "127.0.0.1", 19092


@pytest.fixture
def kafka_listener(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> Iterator[None]:
    """A broker serving Kafka clients where the example looks for it (skipped when another program holds the port)."""
    from cluster.protocol.listener import KafkaListener
    from tests.conftest import _stop_running_broker

    with socket.socket() as sock:
        if sock.connect_ex((KAFKA_EXAMPLE_HOST, KAFKA_EXAMPLE_PORT)) == 0:
            skip_or_fail(f"port {KAFKA_EXAMPLE_PORT} is taken by another program")
    start_test_broker(log_dirs_count=1)
    with KafkaListener({"listeners": f"PLAINTEXT://{KAFKA_EXAMPLE_HOST}:{KAFKA_EXAMPLE_PORT}"}):
        yield
    _stop_running_broker()


@pytest.mark.ray
def test_kafka_clients_example(kafka_listener: None, tmp_path: Path) -> None:
    block = example("test_kafka_clients_example")
    assert f'servers = "{KAFKA_EXAMPLE_HOST}:{KAFKA_EXAMPLE_PORT}"' in block.code
    printed = run_python(block, tmp_path)
    check_expected_prints(block.code, printed)


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")  # Ray Data reads its own deprecated fields
def test_ray_data_kafka_example(kafka_listener: None, tmp_path: Path) -> None:
    block = example("test_ray_data_kafka_example")
    assert f'servers = "{KAFKA_EXAMPLE_HOST}:{KAFKA_EXAMPLE_PORT}"' in block.code
    printed = run_python(block, tmp_path)
    check_expected_prints(block.code, printed)
