"""Security boundaries: topic names never reach outside the log dirs, user data is never evaluated, and the Ray
cluster raybroker starts keeps Ray's token authentication on.

What raybroker does NOT protect: anything running inside the Ray cluster is trusted (it can call any actor,
read any log dir, and Ray itself pickles every argument between processes); the tests here pin the
boundaries that face users: names, values and command-line arguments.
"""

from __future__ import annotations

import ast
import contextlib
import io
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import file_names
from storage.errors import InvalidTopicError, TopicExistsError
from storage.logdir.log_manager import LogManager
from tests.reliability.modes import scaled

pytestmark = pytest.mark.reliability

REPO_ROOT = Path(__file__).resolve().parents[2]
# Strings built from path syntax hit traversal far more often than arbitrary text does.
PATH_ALPHABET = st.sampled_from(["/", "\\", ".", "..", "\x00", "~", "-", "_", "a", "0", " ", "\n", "%2e", "é", ":"])
TOPIC_NAMES = st.one_of(
    st.text(max_size=300),
    st.lists(PATH_ALPHABET, max_size=12).map("".join),
    st.text(alphabet="abc._-/", min_size=1, max_size=260),
    st.sampled_from(["../x", "/etc", "a/../../b", ".", "..", "a" * 249, "a" * 250, "x\x00", "C:\\x"]),
)


def entries_under(root: Path) -> set[Path]:
    return set(root.rglob("*"))


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LogManager, Path]]:
    root = tmp_path_factory.mktemp("security")
    started = LogManager([root / "logs" / "a", root / "logs" / "b"])
    started.startup()
    yield started, root
    started.shutdown()


@settings(max_examples=scaled(300, 5000), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=TOPIC_NAMES)
def test_a_topic_name_is_refused_or_becomes_one_folder_directly_inside_a_log_dir(
    manager: tuple[LogManager, Path], topic: str
) -> None:
    logs, root = manager
    before = entries_under(root)
    try:
        log = logs.get_or_create_log(topic, 0)
    except InvalidTopicError:
        assert entries_under(root) == before
        return
    folder = log.directory.resolve()
    assert folder.parent in logs.log_dirs
    assert folder.name == f"{topic}-0" == file_names.partition_dir_name(topic, 0)
    assert {path.resolve() for path in entries_under(root) - before} <= {folder, *folder.rglob("*")}
    assert file_names.parse_partition_dir_name(folder.name) == (topic, 0)


@settings(max_examples=scaled(500, 10000), deadline=None)
@given(topic=TOPIC_NAMES, partition=st.one_of(st.integers(), st.booleans(), st.none(), st.text(max_size=3)))
def test_partition_folder_names_never_hold_path_syntax(topic: object, partition: object) -> None:
    try:
        name = file_names.partition_dir_name(topic, partition)  # type: ignore[arg-type]
    except InvalidTopicError:
        return
    assert "/" not in name and "\x00" not in name and name not in (".", "..") and len(name) <= 255
    assert Path(name).name == name and (Path("/logs") / name).resolve().parent == Path("/logs")


# --- user data is data ---------------------------------------------------------------------------------------

# Calls that would run or unpickle what they are given. Ray's own transport pickles actor arguments; that is
# the trusted-cluster boundary the README states, not code of raybroker's.
FORBIDDEN_CALLS = {
    "eval",
    "exec",
    "compile",
    "__import__",
    "pickle.loads",
    "pickle.load",
    "cloudpickle.loads",
    "marshal.loads",
    "shelve.open",
    "os.system",
    "os.popen",
    "yaml.load",
    "yaml.unsafe_load",
    "jsonpickle.decode",
}


def call_name(node: ast.Call) -> str:
    parts = []
    target: ast.expr = node.func
    while isinstance(target, ast.Attribute):
        parts.append(target.attr)
        target = target.value
    if isinstance(target, ast.Name):
        parts.append(target.id)
    return ".".join(reversed(parts))


def source_files() -> list[Path]:
    return sorted(path for package in ("storage", "actors", "cluster") for path in (REPO_ROOT / package).rglob("*.py"))


def test_no_module_evaluates_unpickles_or_shells_out_user_data() -> None:
    found = []
    for path in source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = call_name(node)
            shell = any(
                k.arg == "shell" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                for k in node.keywords
            )
            if name in FORBIDDEN_CALLS or (name.startswith("subprocess.") and shell):
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {name}")
    assert found == []
    assert len(source_files()) > 30


def test_subprocesses_take_argument_lists_never_strings() -> None:
    """The only subprocesses are Ray's own commands, each an argv list built from constants and numbers."""
    for path in source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and call_name(node).startswith("subprocess.") and node.args:
                assert not isinstance(node.args[0], ast.Constant | ast.JoinedStr), f"{path}:{node.lineno}"


SHELL_LINES = [
    "$(touch {canary})",
    "`touch {canary}`",
    "; touch {canary}",
    "| touch {canary} &&",
    "'\"; touch {canary}; echo \"'",
    "${{IFS}}touch${{IFS}}{canary}",
    "%s%s%n {{0}} {{}} \\x00",
]


@pytest.fixture(scope="module")
def running_broker(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> Any:
    """Whatever broker the session already runs (starting one costs seconds), else a new one."""
    from actors import Broker
    from storage.errors import BrokerNotAvailableError

    try:
        return Broker.connect()
    except BrokerNotAvailableError:
        return start_test_broker()[0]


@pytest.mark.ray
def test_cli_values_with_shell_metacharacters_are_stored_and_printed_verbatim(
    running_broker: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cluster.cli.main import EXIT_OK, main

    canary = tmp_path / "pwned"
    lines = [f"k{index}:{line.format(canary=canary)}" for index, line in enumerate(SHELL_LINES)]
    topic = "sec-shell-" + tmp_path.name.replace("_", "-")[-40:]
    assert main(["topics", "--create", "--topic", topic, "--partitions", "1"]) == EXIT_OK
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(line + "\n" for line in lines)))
    assert main(["produce", "--topic", topic, "--key-separator", ":"]) == EXIT_OK
    capsys.readouterr()
    code = main(
        [
            *("consume", "--topic", topic, "--from-beginning", "--max-messages", str(len(lines))),
            *("--print-key", "--key-separator", ":"),
        ]
    )
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert out.splitlines() == lines
    assert not canary.exists()
    assert main(["topics", "--delete", "--topic", topic]) == EXIT_OK


@pytest.mark.ray
def test_admin_topic_names_never_create_folders_outside_the_log_dirs(running_broker: Any) -> None:
    from actors import Admin
    from actors.calls import call, get_actor
    from actors.options import log_manager_name
    from storage.errors import UnknownTopicOrPartitionError

    admin = Admin(running_broker)
    managers = {node for topic in admin.list_topics(True) for node in running_broker.topic(topic).partitions.values()}
    log_dirs = [Path(d) for node in managers for d in call(get_actor(log_manager_name(node)).dirs.remote())]
    assert log_dirs
    roots = {d.parent for d in log_dirs}
    created: list[str] = []

    @settings(max_examples=scaled(15, 200), deadline=None)
    @given(topic=TOPIC_NAMES)
    def check(topic: str) -> None:
        before = {root: set(root.iterdir()) for root in roots}
        try:
            described = admin.create_topic(topic, 1)
        except (InvalidTopicError, TopicExistsError):
            return
        created.append(topic)
        log_dir = Path(described.partitions[0].log_dir)
        assert log_dir in log_dirs
        assert (log_dir / f"{topic}-0").is_dir()
        assert {root: set(root.iterdir()) for root in roots} == before

    try:
        check()
    finally:
        for topic in created:
            with contextlib.suppress(UnknownTopicOrPartitionError):
                admin.delete_topic(topic)
