"""What `pip install packages/<member>` would pull in, read from the declared dependencies.

The shipped sidecar must install neither the simulator nor the client (nor the dev tools): the
closure of its declared requirements, followed transitively through the workspace members'
pyproject files and the installed distributions' metadata, must hold none of them. And every
runtime package's imports must be covered by that closure, so the declaration is also enough.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections import deque
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
MEMBERS: dict[str, Path] = {
    tomllib.loads(path.read_text(encoding="utf-8"))["project"]["name"]: path.parent
    for path in sorted((ROOT / "packages").glob("*/pyproject.toml"))
}
RUNTIME = (
    "execpods-core",
    "execpods-contract",
    "execpods-k8s",
    "execpods-kubesim",
    "execpods-client",
    "execpods-sidecar",
)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_requirements(requirements: list[str]) -> set[str]:
    """The names of the requirements a plain install pulls (no extras, markers evaluated)."""
    names = set()
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.add(_canonical(requirement.name))
    return names


def declared(name: str) -> set[str]:
    """A distribution's direct requirements: a member's from its pyproject, others' metadata."""
    if name in MEMBERS:
        project = tomllib.loads((MEMBERS[name] / "pyproject.toml").read_text(encoding="utf-8"))
        return _runtime_requirements(project["project"].get("dependencies", []))
    return _runtime_requirements(metadata.requires(name) or [])


def closure(name: str) -> set[str]:
    """Every distribution `pip install` of `name` would install (itself excluded)."""
    seen: set[str] = set()
    queue = deque([name])
    while queue:
        for requirement in declared(queue.popleft()):
            if requirement not in seen and requirement != name:
                seen.add(requirement)
                queue.append(requirement)
    return seen


def test_the_workspace_members_are_the_ones_this_test_knows() -> None:
    assert set(MEMBERS) == {*RUNTIME, "execpods-devtools"}


@pytest.mark.parametrize("member", sorted(MEMBERS))
def test_the_installed_metadata_matches_the_pyproject(member: str) -> None:
    """The closure reads pyproject files; the installed metadata must say the same."""
    assert _runtime_requirements(metadata.requires(member) or []) == declared(member)


def test_installing_the_sidecar_pulls_neither_the_simulator_nor_the_client() -> None:
    pulled = closure("execpods-sidecar")
    assert {"execpods-core", "execpods-k8s", "execpods-contract", "grpcio"} <= pulled
    assert "kubernetes" in pulled  # followed through the adapter: the walk is transitive
    assert "execpods-kubesim" not in pulled
    assert "execpods-client" not in pulled
    assert "execpods-devtools" not in pulled


def test_the_client_and_the_server_share_only_the_contract() -> None:
    assert "execpods-sidecar" not in closure("execpods-client")
    assert "execpods-contract" in closure("execpods-client")
    assert closure("execpods-contract") & {f"execpods-{m}" for m in ("core", "k8s")} == set()


def test_nothing_that_ships_pulls_the_dev_tools() -> None:
    for member in RUNTIME:
        assert "execpods-devtools" not in closure(member), member


def _execpods_owner(module: str) -> str | None:
    """The workspace member whose `src/` holds `execpods.<sub>`."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    for name, folder in MEMBERS.items():
        if (folder / "src" / "execpods" / parts[1]).is_dir():
            return name
    return None


def _imported_top_modules(folder: Path) -> set[str]:
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
    return found


def _distributions_of(module: str) -> set[str]:
    if module.startswith("execpods."):
        owner = _execpods_owner(module)
        return {owner} if owner else set()
    top = module.split(".", maxsplit=1)[0]
    if top in sys.stdlib_module_names:
        return set()
    return {_canonical(d) for d in metadata.packages_distributions().get(top, [])}


@pytest.mark.parametrize("member", RUNTIME)
def test_every_import_of_a_runtime_package_is_declared(member: str) -> None:
    """The declared closure is enough: each import resolves to the package or its closure."""
    allowed = closure(member) | {member}
    missing = {}
    for module in _imported_top_modules(MEMBERS[member] / "src"):
        owners = _distributions_of(module)
        if owners and not owners & allowed:
            missing[module] = sorted(owners)
    assert missing == {}


def test_the_import_check_sees_an_undeclared_import() -> None:
    """The check above can fail: the simulator is not in the sidecar's closure."""
    owners = _distributions_of("execpods.kubesim")
    assert owners == {"execpods-kubesim"}
    assert not owners & (closure("execpods-sidecar") | {"execpods-sidecar"})
