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

import pytest

ROOT = Path(__file__).resolve().parent.parent

# One worker runs this module's tests, so the parsed sources (functools.cache) are parsed once.
pytestmark = pytest.mark.xdist_group("tests/test_composition.py")
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
    }
    exported = set(execpods.core.__all__)
    assert exported & internals == {"ExecutorPodsBackend"}, "only the facade among the parts"
    assert {"compose_backend", "TotalsRequest", "StreamHandle", "StoreFactory"} <= exported
    # The surface grew by what the core decides and the adapter writes (`PodDecisions`, the claim
    # port and its values), by the composition's three values (`Ports`, `Machinery`,
    # `FeatureSettings`), by the helpers shipped packages used to reach past it for (ids in
    # messages, the driver's readiness, why executors wait, the credentials' stall reason) and by
    # issue 30's values that cross the ports (a pod's conditions and warning, the capacity
    # refusals), and by issue 33's in-place resize (the `ResizeOperations` port and the
    # `MemoryUse` it reads); tests/test_fences.py proves shipped packages use nothing else.
    assert len(exported) <= 93


# --- features: built only by their module's `plug`, plugged only by the composition root --------

CORE = ROOT / "packages/core/src/execpods/core"
CORE_MODULES = sorted(CORE.rglob("*.py"))


def _feature_classes() -> dict[str, Path]:
    """Every class deriving (at any depth) from `features.Feature`, with its module."""
    trees = _trees()
    found: dict[str, Path] = {}
    known = {"Feature"}
    changed = True
    while changed:
        changed = False
        for path in CORE_MODULES:
            for node in ast.walk(trees[path]):
                if (
                    isinstance(node, ast.ClassDef)
                    and node.name not in known
                    and {_name(b) for b in node.bases} & known
                ):
                    known.add(node.name)
                    found[node.name] = path
                    changed = True
    return found


def feature_offences(tree: ast.Module, path: Path, features: dict[str, Path]) -> list[str]:
    """Constructions of a feature outside its own module's `plug`, and `plug` calls outside the
    composition root."""
    offences: list[str] = []

    def visit(node: ast.AST, in_plug: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            in_plug = node.name == "plug"
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in features and not (in_plug and features[name] == path):
                offences.append(f"{path.name}:{node.lineno} builds {name}")
            if name == "plug" and path != COMPOSE:
                offences.append(f"{path.name}:{node.lineno} plugs a feature")
        for child in ast.iter_child_nodes(node):
            visit(child, in_plug)

    visit(tree, False)
    return offences


def test_the_feature_check_sees_a_feature_built_beside_the_root() -> None:
    features = {"NodeBlocklist": ROOT / "badnodes.py"}
    wiring = ast.parse("def assemble():\n    return NodeBlocklist(settings=s, notices=n)\n")
    assert feature_offences(wiring, ROOT / "wiring.py", features) == [
        "wiring.py:2 builds NodeBlocklist"
    ]
    plugged = ast.parse("def plug(s, p):\n    return NodeBlocklist(settings=s, notices=p)\n")
    assert feature_offences(plugged, ROOT / "badnodes.py", features) == []
    assert feature_offences(ast.parse("badnodes.plug(s, p)\n"), ROOT / "x.py", features)


def test_features_are_built_only_by_their_plug_and_plugged_only_by_compose_backend() -> None:
    """Outside a feature's own unit tests, a feature exists only as `compose_backend` plugs it
    from its settings slice: none is built by the sidecar, a test rig or another module."""
    features = _feature_classes()
    assert {"NodeBlocklist", "OomRecoveryMode", "ExecutorClaims", "RegistrationTimeout"} <= set(
        features
    ), features
    offences = [
        offence
        for path, tree in _trees().items()
        if not _core_unit_test(path)
        for offence in feature_offences(tree, path, features)
    ]
    assert offences == []
    plugged = {
        node.func.value.id
        for node in ast.walk(_trees()[COMPOSE])
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "plug"
        and isinstance(node.func.value, ast.Name)
    }
    assert {features[f].stem for f in features} - {"ids"} <= plugged | {"idbudget"}


def _function(path: Path, name: str) -> ast.FunctionDef:
    found = [
        node
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]
    assert len(found) == 1, f"{name} in {path}"
    return found[0]


def test_the_allocator_and_the_root_stay_small() -> None:
    """Issue 28's bounds, kept by a check and not by hope: the allocator orchestrates (its steps
    live in modules of their own) and features travel to the root as one value."""
    allocator = ROOT / "packages/core/src/execpods/core/allocator.py"
    assert len(allocator.read_text().splitlines()) < 250, "allocator.py: move a step out"
    root = _function(COMPOSE, "compose_backend")
    assert root.end_lineno is not None
    assert root.end_lineno - root.lineno + 1 < 60, "compose_backend: 60 lines or more"
    arguments = root.args
    count = len(arguments.posonlyargs) + len(arguments.args) + len(arguments.kwonlyargs)
    assert count < 10, f"compose_backend takes {count} parameters: group them as one value"


# --- core policies: built only inside core (the composition root and its features) -------------

SHIPPED = sorted(
    path
    for path in (ROOT / "packages").glob("*/src/**/*.py")
    if not path.is_relative_to(ROOT / "packages/core")
)
VALUE_BASES = {
    "Enum",
    "IntEnum",
    "StrEnum",
    "Exception",
    "NamedTuple",
    "TypedDict",
    "SettingsBase",
}
"""A core class deriving from one of these is a value or an error, not a policy; so is a
dataclass, and a port (a `Protocol` itself, though a class implementing one, as every feature
implements `Feature`, is a policy)."""
MACHINERY = {"clock.py", "scheduling.py", "profiles.py", "testing"}
"""Core modules whose classes callers do build: what `Ports` and `Machinery` take (clocks,
schedulers, the declared profiles) and the in-memory doubles of `execpods.core.testing`; a
module is named by its path below core's folder, a package by its folder."""
PART_ALONE = {("packages/devtools/src/execpods/devtools/bench/sidecar.py", "RemovalChannel")}
"""A benchmark of one part alone (the removal window's memory), as core's unit tests do."""


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any(
        _name(d.func if isinstance(d, ast.Call) else d) == "dataclass" for d in node.decorator_list
    )


def core_policies(trees: dict[Path, ast.Module]) -> dict[str, str]:
    """Core's public classes with behaviour (not dataclasses, ports, enums, errors or settings),
    by name, with their module's path below core's folder; bases followed to a fixed point."""
    classes = {
        node.name: (
            path.relative_to(CORE).as_posix() if path.is_relative_to(CORE) else path.name,
            node,
        )
        for path, tree in trees.items()
        for node in tree.body
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
    }
    values = set(VALUE_BASES)
    changed = True
    while changed:
        changed = False
        for name, (_, node) in classes.items():
            if name not in values and (
                _is_dataclass(node) or {_name(b) for b in node.bases} & values
            ):
                values.add(name)
                changed = True
    ports = {name for name, (_, node) in classes.items() if "Protocol" in map(_name, node.bases)}
    return {name: module for name, (module, _) in classes.items() if name not in values | ports}


def policy_offences(tree: ast.Module, where: str, policies: dict[str, str]) -> list[str]:
    """Constructions in a shipped package (outside core) of a core policy that is not machinery
    a caller hands the root."""
    return [
        f"{where}:{node.lineno} builds {name} ({policies[name]})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (name := _name(node.func)) in policies
        and policies[name].split("/")[0] not in MACHINERY
        and name not in STORES | PARTS  # the root's own parts: the checks above
        and (where, name) not in PART_ALONE
    ]


def test_the_policy_check_sees_a_core_policy_built_in_the_sidecar() -> None:
    """Issue 33's resize was built so: `ExecutorResizer` by the sidecar's wiring, its resizes
    counted by no pod metric. The check sees that shape, and leaves values and machinery be."""
    core = {
        Path("resize.py"): ast.parse(
            "class ExecutorResizer:\n    def run_once(self): ...\n"
            "@dataclass(frozen=True)\nclass MemoryUse:\n    pod: str\n"
            "class ResizeOperations(Protocol):\n    def resize_memory(self): ...\n"
            "class ResizeSettings(SettingsBase):\n    pass\n"
        ),
        Path("clock.py"): ast.parse("class ManualClock:\n    def advance(self): ...\n"),
    }
    policies = core_policies(core)
    assert policies == {"ExecutorResizer": "resize.py", "ManualClock": "clock.py"}
    wiring = ast.parse(
        "def connect():\n"
        "    use = MemoryUse(pod='p')\n"
        "    clock = ManualClock()\n"
        "    return ExecutorResizer(settings=s.resize, operations=o, app_id=a)\n"
    )
    assert policy_offences(wiring, "wiring.py", policies) == [
        "wiring.py:4 builds ExecutorResizer (resize.py)"
    ]


def test_shipped_packages_build_no_core_policy_outside_the_root() -> None:
    """A policy (a feature, the resize rounds, the removal channel...) exists in a running
    allocation only as `compose_backend` builds it, so it gets the backend's counted ports."""
    trees = _trees()
    policies = core_policies({path: trees[path] for path in CORE_MODULES})
    assert {"ExecutorResize", "NodeBlocklist", "RemovalChannel"} <= set(policies)
    offences = [
        offence
        for path in SHIPPED
        for offence in policy_offences(trees[path], str(path.relative_to(ROOT)), policies)
    ]
    assert offences == [], "build these in core, through compose_backend (features.py)"
