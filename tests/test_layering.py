"""The three layers import in one direction only: `storage` <- `actors` <- `cluster`.

`storage/` must stay importable without Ray or Spark, and `actors/` must not pull in Spark; `cluster/` is the only
place that talks to RayDP/PySpark.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Prints which of the named modules sit in sys.modules after importing every module of `storage`.
IMPORT_ALL_STORAGE = """
import importlib, json, pkgutil, sys
import storage
imported = [info.name for info in pkgutil.walk_packages(storage.__path__, "storage.")]
for name in imported:
    importlib.import_module(name)
print(json.dumps({"imported": imported, "loaded": sorted(n for n in ("ray", "raydp", "pyspark") if n in sys.modules)}))
"""

FORBIDDEN_IMPORTS = {
    "storage": {"ray", "raydp", "pyspark", "actors", "cluster"},
    "actors": {"raydp", "pyspark", "cluster"},
}


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


def test_importing_all_storage_modules_loads_no_ray_or_spark() -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL_STORAGE],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert "storage.errors" in report["imported"]
    assert report["loaded"] == []


@pytest.mark.parametrize("package", sorted(FORBIDDEN_IMPORTS))
def test_package_sources_never_import_a_higher_layer(package: str) -> None:
    sources = sorted((REPO_ROOT / package).rglob("*.py"))
    assert sources, f"no sources found under {package}/"
    offenders = {
        str(path.relative_to(REPO_ROOT)): sorted(imported_top_level_names(path) & FORBIDDEN_IMPORTS[package])
        for path in sources
    }
    assert {path: names for path, names in offenders.items() if names} == {}
