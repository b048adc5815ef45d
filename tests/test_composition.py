"""`compose_backend` is the only builder of a running allocation's parts.

Outside core's own unit tests of the store and the reconcilers, nothing constructs the allocator,
the lifecycle manager, the backend or a snapshot store (or a subclass of one) except:

- `execpods/core/compose.py` itself;
- a store factory handed to it (a function taking the keyword-only `labels`, `classifier` and
  `clock` that the settings derive), which may make a store, and only a store.

So every store, deterministic or timed, classifies pods as the settings say: the defect this
guards against was a store built beside the root, without the classifier.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPO_SOURCES = [
    *sorted((ROOT / "packages").glob("*/src/**/*.py")),
    *sorted(ROOT.glob("tests/**/*.py")),
]
COMPOSE = ROOT / "packages/core/src/execpods/core/compose.py"
STORES = {"ScheduledSnapshotsStore", "DeterministicSnapshotsStore"}
PARTS = {"ExecutorPodsAllocator", "ExecutorPodsLifecycleManager", "ExecutorPodsBackend"}
FACTORY_ARGS = {"labels", "classifier", "clock"}


def _core_unit_test(path: Path) -> bool:
    """Core's own tests of one part (the store, the reconcilers); its rigs go through the root."""
    return path.parent == ROOT / "tests/core" and path.name != "conftest.py"


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


@functools.cache
def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in REPO_SOURCES}


def _tracked(trees: dict[Path, ast.Module]) -> tuple[set[str], set[str]]:
    """The store classes and the part classes, subclasses included (to a fixed point)."""
    stores, parts = set(STORES), set(PARTS)
    changed = True
    while changed:
        changed = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = {_name(b) for b in node.bases}
                for kind in (stores, parts):
                    if bases & kind and node.name not in kind:
                        kind.add(node.name)
                        changed = True
    return stores, parts


def _is_store_factory(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> bool:
    if isinstance(function, ast.Lambda):
        return False
    return {a.arg for a in function.args.kwonlyargs} >= FACTORY_ARGS


def _constructions(
    tree: ast.Module, stores: set[str], parts: set[str]
) -> list[tuple[int, str, bool]]:
    """(line, class, inside a store factory) for each construction of a tracked class."""
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, factory: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            factory = _is_store_factory(node)
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in stores or name in parts:
                found.append((node.lineno, name, factory))
        for child in ast.iter_child_nodes(node):
            visit(child, factory)

    visit(tree, False)
    return found


def test_only_the_composition_root_builds_the_parts_and_factories_only_stores() -> None:
    trees = _trees()
    stores, parts = _tracked(trees)
    offences = []
    for path, tree in trees.items():
        if path == COMPOSE or _core_unit_test(path):
            continue
        for line, name, in_factory in _constructions(tree, stores, parts):
            if name in stores and in_factory:
                continue
            offences.append(f"{path.relative_to(ROOT)}:{line} builds {name}")
    assert offences == [], "build these through execpods.core.compose_backend"


def test_the_check_sees_a_construction_outside_the_root() -> None:
    stores, parts = _tracked({})
    bad = ast.parse(
        "def f():\n    return ExecutorPodsAllocator(settings=s)\n"
        "def g(*, labels, classifier, clock):\n    return ScheduledSnapshotsStore(x)\n"
        "def h():\n    return DeterministicSnapshotsStore()\n"
    )
    assert _constructions(bad, stores, parts) == [
        (2, "ExecutorPodsAllocator", False),
        (4, "ScheduledSnapshotsStore", True),
        (6, "DeterministicSnapshotsStore", False),
    ]


def test_the_root_does_build_them() -> None:
    trees = _trees()
    stores, parts = _tracked(trees)
    built = {name for _, name, _ in _constructions(trees[COMPOSE], stores, parts)}
    assert {"ExecutorPodsAllocator", "ExecutorPodsLifecycleManager", "ExecutorPodsBackend"} <= built


def test_the_core_exports_what_a_user_needs_not_the_roots_parts() -> None:
    """`execpods.core` exports the facade, the hooks, the ports and their values; the parts only
    the root builds (and dead helpers) are reachable only through their modules."""
    import execpods.core

    internals = {
        *PARTS,
        *STORES,
        "LifecycleFanout",
        "RemovalChannel",
        "CreateRunner",
        "SerialRunner",
        "ThreadPoolRunner",
        "split_slots",
        "executors_to_request",
        "ExecutorFailureTracker",
        "AllocatorStats",
    }
    exported = set(execpods.core.__all__)
    assert exported & internals == {"ExecutorPodsBackend"}, "only the facade among the parts"
    assert {"compose_backend", "TotalsRequest", "StreamHandle", "StoreFactory"} <= exported
    # The ports grew by what the core decides and the adapter writes (`PodDecisions`, the claim
    # port and its values) and by the composition's three values (`Ports`, `Machinery`,
    # `FeatureSettings`); issue 30 adds four values that cross the ports: the pod's conditions and
    # warning (the adapter builds them) and the two capacity refusals (the adapter raises them);
    # `test_layering.py` proves shipped packages use nothing else.
    assert len(exported) <= 84
