"""The fences between the packages hold, and each one is shown to fail when it is crossed.

- Only the adapter imports `kubernetes`: the import-linter contract covers every shipped package,
  and fails when a sidecar or client module imports the client (checked on the real import graph
  with one import added, so the contract in `pyproject.toml` is what is tested).
- Shipped packages use core only through its public surface: `execpods.core`'s `__all__` and the
  settings kit (`execpods.core.settingkit`); an import of any other core module, or of a name
  `__all__` does not list, fails (import-linter's protected contract and an AST check).
- Core decides, the adapter writes manifests: no core module but `testing` writes a manifest key.
"""

from __future__ import annotations

import ast
import copy
import functools
from pathlib import Path
from typing import Any

import execpods.core
import grimp
import pytest
import yaml
from importlinter.application.use_cases import read_user_options
from importlinter.configuration import configure
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.protected import ProtectedContract
from importlinter.domain.contract import Contract

ROOT = Path(__file__).resolve().parent.parent

# One worker runs this module's tests, so the import graph (functools.cache) is built once.
pytestmark = pytest.mark.xdist_group("tests/test_fences.py")
SHIPPED = {
    "execpods.core": "core",
    "execpods.k8s": "k8s_adapter",
    "execpods.sidecar": "sidecar",
    "execpods.client": "client",
    "execpods.kubesim": "kubesim",
    "execpods.v1": "contract",
}
CORE = ROOT / "packages/core/src/execpods/core"


def _contract_options(name_starts: str) -> dict[str, Any]:
    """The contract's options as `lint-imports` reads them from pyproject.toml."""
    configure()  # as `lint-imports` does before it reads anything
    options = read_user_options(str(ROOT / "pyproject.toml"))
    (found,) = [c for c in options.contracts_options if str(c["name"]).startswith(name_starts)]
    return dict(found)


@functools.cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("execpods", include_external_packages=True, cache_dir=None)


def _kept(contract_type: type[Contract], options: dict[str, Any], *added: tuple[str, str]) -> bool:
    """The project's contract checked on the real graph, with `added` imports put in."""
    graph = copy.deepcopy(_graph())
    for importer, imported in added:
        graph.add_import(
            importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}"
        )
    session = {"root_packages": ["execpods"], "include_external_packages": True}
    contract = contract_type(
        name=options["name"], session_options=session, contract_options=options
    )
    return contract.check(graph, verbose=False).kept


KUBERNETES = "only the adapter's gateway, cluster and errors modules import the kubernetes"
PUBLIC_SURFACE = "shipped packages use core through its public surface"


def test_the_kubernetes_fence_covers_every_shipped_package() -> None:
    options = _contract_options(KUBERNETES)
    assert set(options["source_modules"]) == set(SHIPPED)
    assert _kept(ForbiddenContract, options)


@pytest.mark.parametrize(
    "importer",
    ["execpods.sidecar.wiring", "execpods.sidecar.rpc.service", "execpods.client.sync"],
)
def test_the_kubernetes_fence_fails_when_a_sidecar_or_client_module_imports_it(
    importer: str,
) -> None:
    options = _contract_options(KUBERNETES)
    assert not _kept(ForbiddenContract, options, (importer, "kubernetes"))


def test_the_public_surface_fence_fails_on_a_core_submodule_import() -> None:
    options = _contract_options(PUBLIC_SURFACE)
    assert _kept(ProtectedContract, options)
    assert _kept(ProtectedContract, options, ("execpods.sidecar.wiring", "execpods.core"))
    assert _kept(
        ProtectedContract, options, ("execpods.sidecar.wiring", "execpods.core.settingkit")
    )
    assert not _kept(
        ProtectedContract, options, ("execpods.sidecar.wiring", "execpods.core.allocator")
    )
    assert not _kept(ProtectedContract, options, ("execpods.k8s.builder", "execpods.core.claims"))


# --- the public surface, name by name ----------------------------------------------------------


def surface_violations(source: str, exported: set[str]) -> list[str]:
    """`from execpods.core import X` with X not exported, and any import of a core submodule
    other than the settings kit."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "execpods.core":
                found += [f"execpods.core.{a.name}" for a in node.names if a.name not in exported]
            elif node.module.startswith("execpods.core.") and node.module != (
                "execpods.core.settingkit"
            ):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [
                a.name
                for a in node.names
                if a.name.startswith("execpods.core.") and a.name != "execpods.core.settingkit"
            ]
    return found


def test_the_surface_check_catches_what_it_should() -> None:
    exported = {"CoreSettings"}
    assert surface_violations("from execpods.core.settings import CoreSettings\n", exported)
    assert surface_violations("from execpods.core import ExecutorPodsAllocator\n", exported)
    assert surface_violations("import execpods.core.allocator\n", exported)
    assert not surface_violations("from execpods.core import CoreSettings\n", exported)
    assert not surface_violations("from execpods.core.settingkit import setting\n", exported)


@pytest.mark.parametrize("package", sorted(set(SHIPPED) - {"execpods.core"}))
def test_shipped_packages_use_only_core_s_public_surface(package: str) -> None:
    exported = set(execpods.core.__all__)
    root = ROOT / "packages" / SHIPPED[package] / "src" / Path(*package.split("."))
    problems = {
        str(path.relative_to(ROOT)): found
        for path in sorted(root.rglob("*.py"))
        if (found := surface_violations(path.read_text(encoding="utf-8"), exported))
    }
    assert problems == {}


# --- core decides, the adapter writes manifests ------------------------------------------------

MANIFEST_KEYS = frozenset(
    {
        "metadata", "spec", "containers", "env", "volumes", "affinity", "nodeAffinity",
        "labels", "annotations", "ownerReferences", "persistentVolumeClaim", "claimName",
        "resources", "requests", "limits", "nodeSelector", "matchExpressions",
        "nodeSelectorTerms", "requiredDuringSchedulingIgnoredDuringExecution", "value", "name",
    }
)  # fmt: skip


def manifest_writes(source: str) -> list[str]:
    """Writes of a manifest key: `x["spec"] = ...`, `x["env"] += ...`, `del x["labels"]`,
    `x.setdefault("spec", ...)`, `x["volumes"].append(...)`, `x.update({"spec": ...})`, and a
    write anywhere below one: `pod["metadata"]["annotations"][key] = ...`,
    `pod.get("spec", {})["nodeName"] = ...`, `c.get("env", []).append(...)`."""
    found: list[str] = []

    def key_of(target: ast.expr) -> str | None:
        """The first manifest key on the way from `target` down to the object it indexes."""
        node: ast.expr = target
        while True:
            key: object = None
            if isinstance(node, ast.Subscript):
                key = node.slice.value if isinstance(node.slice, ast.Constant) else None
                node = node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "setdefault")
                and node.args
            ):
                first = node.args[0]
                key = first.value if isinstance(first, ast.Constant) else None
                node = node.func.value
            else:
                return None
            if isinstance(key, str) and key in MANIFEST_KEYS:
                return key

    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attribute = node.func
            first = node.args[0] if node.args else None
            if attribute.attr == "setdefault" and isinstance(first, ast.Constant):
                if first.value in MANIFEST_KEYS:
                    found.append(f"line {node.lineno}: setdefault({first.value!r})")
            elif attribute.attr in ("append", "extend", "insert", "update", "pop", "remove"):
                key = key_of(attribute.value)
                if key in MANIFEST_KEYS:
                    found.append(f"line {node.lineno}: [{key!r}].{attribute.attr}")
                if attribute.attr == "update" and isinstance(first, ast.Dict):
                    keys = {k.value for k in first.keys if isinstance(k, ast.Constant)}
                    found += [f"line {node.lineno}: update {k!r}" for k in keys & MANIFEST_KEYS]
        line = getattr(node, "lineno", 0)
        found += [
            f"line {line}: [{key!r}] written"
            for target in targets
            if (key := key_of(target)) in MANIFEST_KEYS
        ]
    return found


def test_the_manifest_check_catches_round_3s_edits() -> None:
    """What three core modules did at 128638e (bad nodes, OOM recovery, claims)."""
    assert manifest_writes(
        'spec = pod.setdefault("spec", {})\nterms = required.setdefault("nodeSelectorTerms", [])\n'
    )
    assert manifest_writes('container["env"] = [*kept, {"name": "X", "value": "1"}]\n')
    assert manifest_writes('source["claimName"] = new\n')
    assert manifest_writes('manifest.setdefault("metadata", {})["ownerReferences"] = [owner]\n')
    assert manifest_writes('pod["spec"]["volumes"].append(volume)\n')
    assert not manifest_writes('name = manifest["metadata"]["name"]\n')
    assert not manifest_writes('counts["created"] += 1\n')


def test_the_manifest_check_sees_writes_below_a_manifest_key() -> None:
    """A write whose last key is a variable, or reached through `.get`, edits the manifest all
    the same."""
    assert manifest_writes('pod["metadata"]["annotations"][key] = "x"\n')
    assert manifest_writes('pod.get("spec", {})["nodeName"] = node\n')
    assert manifest_writes('container.get("env", []).append(variable)\n')
    assert manifest_writes('del pod["metadata"]["labels"][label]\n')
    assert manifest_writes('pod["spec"]["containers"][0]["resources"]["limits"][k] = v\n')
    assert not manifest_writes('seen[pod["metadata"]["name"]] = True\n')
    assert not manifest_writes('name = pod.get("metadata", {}).get("name")\n')
    assert not manifest_writes("counts[key] += 1\n")


def test_no_core_module_but_testing_writes_a_manifest_key() -> None:
    problems = {
        path.name: found
        for path in sorted(CORE.rglob("*.py"))
        if path.relative_to(CORE).parts[0] != "testing"
        and (found := manifest_writes(path.read_text(encoding="utf-8")))
    }
    assert problems == {}


# --- the fast gate before each commit ----------------------------------------------------------


def test_the_pre_commit_hook_runs_the_fast_gate() -> None:
    """The one local hook runs what BUILD.md calls the fast gate, on the whole tree."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    (repo,) = config["repos"]
    assert repo["repo"] == "local"
    (hook,) = repo["hooks"]
    assert hook["entry"] == "python3 tools/dev.py lint"
    assert (hook["language"], hook["pass_filenames"], hook["always_run"]) == (
        "system",
        False,
        True,
    )
    assert "`python3 tools/dev.py lint`" in (ROOT / "BUILD.md").read_text(encoding="utf-8")
    assert '"lint"' in (ROOT / "tools/dev.py").read_text(encoding="utf-8")
