"""A package's public names imported on first use (PEP 562), so importing one of its modules stays cheap.

Every Ray actor is a new process that imports its class's module, and with it every `__init__.py` above that module.
Eager re-exports in `storage/__init__.py` and `actors/__init__.py` would make each partition actor import the log
manager, the cleaner and every client facade it never uses: about 0.35 s of CPU per process (1.76 s against 1.41 s
for `import ray, actors.server.partition_log`, best of three, nothing else running), paid for every partition created.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, which re-exports each name of `exports` from its module
    (name -> module path), importing that module when the name is first read. A name whose path ends in that
    name is the module itself (`"serializers": "actors.clients.serializers"`)."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        value = imported if module.rpartition(".")[2] == name else getattr(imported, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
