"""The three layers import in one direction only: `storage` <- `actors` <- `cluster`.

`storage/` must stay importable without Ray or Spark, and `actors/` must not pull in Spark; `cluster/` is the only
place that talks to RayDP/PySpark. Inside `actors/`, the plain roles of `actors/core/` import neither Ray nor any
`actors` module outside `actors.core`, so they run and are tested without Ray. Inside `storage/` and `actors/`,
the subpackages are ordered too (`LAYER_ORDER`), and none imports one above it or beside it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Prints which of the named modules sit in sys.modules after importing every module of a package. `actors/__init__`
# re-exports the Ray facades, so for `actors.core` the parent package is stood in for by a bare one of the same path.
IMPORT_ALL_MODULES = """
import importlib, json, pkgutil, sys, types
if {package!r}.startswith("actors."):
    sys.modules["actors"] = types.ModuleType("actors")
    sys.modules["actors"].__path__ = ["actors"]
package = importlib.import_module({package!r})
imported = [info.name for info in pkgutil.walk_packages(package.__path__, {package!r} + ".")]
for name in imported:
    importlib.import_module(name)
loaded = sorted(n for n in ("ray", "raydp", "pyspark") if n in sys.modules)
print(json.dumps({{"imported": imported, "loaded": loaded}}))
"""

FORBIDDEN_IMPORTS = {
    "storage": {"ray", "raydp", "pyspark", "actors", "cluster"},
    "actors": {"raydp", "pyspark", "cluster"},
}
# `actors/core/` imports no Ray either, and of `actors` only itself (`core_imports_outside_core`).
CORE_FORBIDDEN_PACKAGES = FORBIDDEN_IMPORTS["actors"] | {"ray"}


def imported_top_level_names(source_path: Path) -> set[str]:
    """Top-level package names of every absolute import in a file, including imports inside functions."""
    tree = ast.parse(source_path.read_text(encoding="utf-8"), filename=str(source_path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names.add(node.module.split(".")[0])
    return names


def core_imports_outside_core(source_path: Path) -> set[str]:
    """The `actors` modules outside `actors.core` that a file imports, wherever the import stands."""
    tree = ast.parse(source_path.read_text(encoding="utf-8"), filename=str(source_path))
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            modules.add(node.module)
            if node.module == "actors":
                modules.update(f"actors.{alias.name}" for alias in node.names)
    return {m for m in modules if (m == "actors" or m.startswith("actors.")) and not _in_core(m)}


def _in_core(module: str) -> bool:
    return module == "actors.core" or module.startswith("actors.core.")


def import_every_module(package: str) -> dict[str, list[str]]:
    """Imports every module of `package` in a fresh interpreter: the modules imported, and which of Ray, RayDP and
    PySpark that loaded."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL_MODULES.format(package=package)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, list[str]] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def test_importing_all_storage_modules_loads_no_ray_or_spark() -> None:
    report = import_every_module("storage")
    assert "storage.errors" in report["imported"]
    assert report["loaded"] == []


def test_importing_all_core_modules_loads_no_ray_or_spark() -> None:
    report = import_every_module("actors.core")
    assert "actors.core.controller.assignment" in report["imported"]
    assert report["loaded"] == []


def test_core_sources_import_no_ray_and_no_other_actors_module() -> None:
    sources = sorted((REPO_ROOT / "actors" / "core").rglob("*.py"))
    assert sources, "no sources found under actors/core/"
    offenders = {
        str(path.relative_to(REPO_ROOT)): sorted(
            imported_top_level_names(path) & CORE_FORBIDDEN_PACKAGES | core_imports_outside_core(path)
        )
        for path in sources
    }
    assert {path: names for path, names in offenders.items() if names} == {}


@pytest.mark.parametrize("package", sorted(FORBIDDEN_IMPORTS))
def test_package_sources_never_import_a_higher_layer(package: str) -> None:
    sources = sorted((REPO_ROOT / package).rglob("*.py"))
    assert sources, f"no sources found under {package}/"
    offenders = {
        str(path.relative_to(REPO_ROOT)): sorted(imported_top_level_names(path) & FORBIDDEN_IMPORTS[package])
        for path in sources
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def project_module_name(path: Path) -> str:
    """`storage/records/record_batch.py` -> `storage.records.record_batch`; a package's `__init__.py` -> the package."""
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path, modules: set[str]) -> set[str]:
    """The project modules a file imports, wherever the import stands (module top, function, class).

    `from storage.records import record_batch` names the module `storage.records.record_batch`; `from
    storage.errors import X` names `storage.errors`. Importing a submodule runs its package's `__init__`, so
    the packages on the way count too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            targets.add(node.module)
            targets.update(f"{node.module}.{alias.name}" for alias in node.names)
    found: set[str] = set()
    for target in targets:
        parts = target.split(".")
        found.update(".".join(parts[:end]) for end in range(1, len(parts) + 1) if ".".join(parts[:end]) in modules)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def project_import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, over `storage`, `actors` and `cluster`.

    A package's `__init__` re-exporting its own submodules is how a curated public surface is made, so the
    edges from a package to the modules below it are left out; every other edge counts."""
    paths = {
        project_module_name(path): path
        for package in FORBIDDEN_IMPORTS | {"cluster": set()}
        for path in (REPO_ROOT / package).rglob("*.py")
    }
    modules = set(paths)
    return {
        module: {target for target in project_imports(path, modules) if not target.startswith(module + ".")} - {module}
        for module, path in paths.items()
    }


def test_import_cycle_finder_sees_a_cycle_through_a_function_level_import() -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_project_modules_import_no_cycle() -> None:
    graph = project_import_graph()
    assert "storage.records.record_batch" in graph
    assert import_cycles(graph) == []


# Inside a layer, its places from the lowest up: a module imports only from its own place or a lower level, so two
# places of one level import neither each other. A place is a subpackage, a top-level module named on its own, or
# `<layer>.*`, the layer's other top-level modules (the helpers every subpackage uses). The layer's package itself
# (its `__init__`, the public surface) sits above them all.
LAYER_ORDER: dict[str, tuple[tuple[str, ...], ...]] = {
    "storage": (
        ("storage.*",),
        ("storage.files",),
        ("storage.config",),
        ("storage.records",),
        ("storage.segment",),
        ("storage.partition",),
        ("storage.compaction",),
        ("storage.logdir",),
        ("storage.dump_log",),
    ),
    "actors": (
        ("actors.core",),
        ("actors.*",),
        ("actors.channels", "actors.metrics"),
        ("actors.server",),
        ("actors.clients",),
    ),
}


def layer_place(module: str, layer: str) -> tuple[int, str]:
    """The level of `module` in `LAYER_ORDER[layer]` and its place there."""
    levels = LAYER_ORDER[layer]
    if module == layer:
        return len(levels), layer
    for level, places in enumerate(levels):
        for place in places:
            if module == place or module.startswith(place + "."):
                return level, place
    if module.count(".") == 1:
        return next(level for level, places in enumerate(levels) if f"{layer}.*" in places), f"{layer}.*"
    raise AssertionError(f"{module} has no place in LAYER_ORDER[{layer!r}]")


def upward_imports(graph: dict[str, set[str]], layer: str) -> dict[str, list[str]]:
    """The modules of `layer` that import a module of another place of their level or of a higher one, with those
    imports. The packages a module sits in are left out: importing any module runs them."""
    found: dict[str, list[str]] = {}
    for module, targets in graph.items():
        if module != layer and not module.startswith(layer + "."):
            continue
        level, place = layer_place(module, layer)
        upward = sorted(
            target
            for target in targets
            if target.startswith(layer + ".")
            and not module.startswith(target + ".")
            and layer_place(target, layer)[0] >= level
            and layer_place(target, layer)[1] != place
        )
        if upward:
            found[module] = upward
    return found


def test_upward_import_finder_sees_an_import_of_a_higher_or_a_sibling_place() -> None:
    graph = {
        "actors.core.in_process_broker": {"actors", "actors.core", "actors.calls"},
        "actors.calls": {"actors.options", "actors.core.in_process_broker"},
        "actors.channels.append_frames": {"actors.metrics.names", "actors.channels.local_sockets"},
        "actors.clients.producer": {"actors.server.remote", "actors.channels.append_frames", "actors.clients"},
    }
    assert upward_imports(graph, "actors") == {
        "actors.core.in_process_broker": ["actors.calls"],
        "actors.channels.append_frames": ["actors.metrics.names"],
    }


@pytest.mark.parametrize("layer", sorted(LAYER_ORDER))
def test_every_subpackage_of_a_layer_has_a_place(layer: str) -> None:
    subpackages = {f"{layer}.{path.parent.name}" for path in (REPO_ROOT / layer).glob("*/__init__.py")}
    placed = {place for places in LAYER_ORDER[layer] for place in places}
    assert subpackages - placed == set()


@pytest.mark.parametrize("layer", sorted(LAYER_ORDER))
def test_no_module_imports_a_higher_place_of_its_layer(layer: str) -> None:
    graph = project_import_graph()
    assert f"{layer}.errors" in graph or f"{layer}.calls" in graph
    assert upward_imports(graph, layer) == {}


# `storage.logdir` holds the log manager, which sits above every partition log; these packages sit below it.
BELOW_LOG_DIRS = ("records", "segment", "partition", "compaction", "config", "files")
# Past this a module holds more than one concept: split it where its sections part.
MAX_MODULE_LINES = 900


def log_dir_imports(graph: dict[str, set[str]], package: str) -> dict[str, list[str]]:
    """The modules of `storage.<package>` that import `storage.logdir` (or one of its modules), with those imports."""
    prefix = f"storage.{package}"
    found = {
        module: sorted(
            target for target in targets if target == "storage.logdir" or target.startswith("storage.logdir.")
        )
        for module, targets in graph.items()
        if module == prefix or module.startswith(prefix + ".")
    }
    return {module: targets for module, targets in found.items() if targets}


def test_log_dir_import_finder_sees_an_upward_import() -> None:
    graph = {"storage.partition.log": {"storage.logdir.log_dirs", "storage.errors"}, "storage.logdir.x": {"storage"}}
    assert log_dir_imports(graph, "partition") == {"storage.partition.log": ["storage.logdir.log_dirs"]}
    assert log_dir_imports(graph, "records") == {}


@pytest.mark.parametrize("package", BELOW_LOG_DIRS)
def test_storage_packages_below_the_log_dirs_never_import_them(package: str) -> None:
    graph = project_import_graph()
    assert f"storage.{package}" in graph
    assert log_dir_imports(graph, package) == {}


def test_no_module_is_over_900_lines() -> None:
    sizes = {
        str(path.relative_to(REPO_ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for layer in ("storage", "actors", "cluster", "benchmarks")
        for path in (REPO_ROOT / layer).rglob("*.py")
    }
    assert "storage/errors.py" in sizes and "cluster/cli/main.py" in sizes
    assert {path: lines for path, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}


def repeated_module_names(paths: list[Path]) -> dict[str, list[str]]:
    """The file names (`__init__.py` aside) that more than one of `paths` has, each with the paths that have it."""
    by_name: dict[str, list[str]] = {}
    for path in paths:
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(str(path.relative_to(REPO_ROOT)))
    return {name: sorted(found) for name, found in by_name.items() if len(found) > 1}


def test_the_repeated_name_finder_sees_a_repeated_name() -> None:
    paths = [REPO_ROOT / "a" / "log.py", REPO_ROOT / "b" / "log.py", REPO_ROOT / "a" / "__init__.py"]
    paths.append(REPO_ROOT / "b" / "__init__.py")
    assert repeated_module_names(paths) == {"log.py": ["a/log.py", "b/log.py"]}


def test_no_two_modules_share_a_file_name() -> None:
    """A name says which module it is wherever it is read (a traceback, a grep, an editor tab), across layers."""
    paths = [
        path for layer in ("storage", "actors", "cluster", "benchmarks") for path in (REPO_ROOT / layer).rglob("*.py")
    ]
    assert len(paths) > 250
    assert repeated_module_names(paths) == {}
