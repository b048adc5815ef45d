"""The sidecar uses the adapter and the simulator only through their top-level packages."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import execpods.sidecar

SEALED = ("execpods.k8s", "execpods.kubesim")


def _modules() -> list[Path]:
    root = Path(execpods.sidecar.__file__).parent
    return sorted(root.rglob("*.py"))


def _is_submodule(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def violations(source: str) -> list[str]:
    """`import execpods.k8s.x`, `from execpods.k8s.x import y` and `from execpods.k8s import x`
    (x a submodule) break the seal; importing the package's own names does not."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module in SEALED:
                names += [
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if _is_submodule(f"{node.module}.{a.name}")
                ]
        found.extend(
            f"line {getattr(node, 'lineno', 0)}: {name}"
            for name in names
            if any(name.startswith(package + ".") for package in SEALED)
        )
    return found


def test_the_checker_catches_submodule_imports() -> None:
    assert violations("from execpods.k8s.watch import WatchSource\n")
    assert violations("import execpods.kubesim.api\n")
    assert violations("from execpods.kubesim.cluster import ClusterConfig\n")
    assert not violations("from execpods.k8s import WatchSource, connect\n")
    assert not violations("from execpods.kubesim import KubeSim\nimport execpods.k8s\n")
    assert violations("from execpods.k8s import watch\n")


def test_no_sidecar_module_reaches_into_the_adapter_or_the_simulator() -> None:
    modules = _modules()
    assert len(modules) > 5
    problems = {
        str(path.name): found
        for path in modules
        if (found := violations(path.read_text(encoding="utf-8")))
    }
    assert problems == {}
