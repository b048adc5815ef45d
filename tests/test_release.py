"""Released as software: one version, wheels with their metadata, the sidecar's installs alone.

The wheel test builds every member's wheel from the workspace (uv, offline: hatchling comes from
uv's cache), then makes a fresh virtual environment holding only what the sidecar's wheel asks
for: the third-party packages from the lock, installed offline from uv's cache, and the sidecar
with its sibling wheels resolved from the built ones (`--find-links`), so a dependency the wheel
forgot to declare fails the install or the start-up. The installed command then says its version
and starts against a simulator.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from email.parser import Parser
from pathlib import Path
from types import SimpleNamespace

import pytest
from execpods.kubesim import KubeSim

from tests.kubesim.support import eventually

ROOT = Path(__file__).resolve().parents[1]


release = SimpleNamespace(**runpy.run_path(str(ROOT / "tools" / "release.py")))
workspace_version: Callable[[], str] = release.workspace_version
MEMBERS = sorted((ROOT / "packages").glob("*/pyproject.toml"))


SIDECAR_ONLY = ("--package", "execpods-sidecar", "--no-install-workspace")


def _uv() -> list[str]:
    """uv as tools/dev.py finds it: on PATH, else the module of the Python on PATH."""
    found = shutil.which("uv")
    if found:
        return [found]
    for python in ("python3", sys.executable):
        command = [shutil.which(python) or python, "-m", "uv"]
        probe = subprocess.run([*command, "--version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return command
    pytest.skip("uv is not installed (tools/dev.py installs it)")


def test_every_member_carries_the_workspace_version_and_pins_its_siblings() -> None:
    assert release.drifted(workspace_version()) == []
    names = {tomllib.loads(p.read_text())["project"]["name"] for p in MEMBERS}
    for path in MEMBERS:
        project = tomllib.loads(path.read_text())["project"]
        assert project["version"] == workspace_version()
        for requirement in project.get("dependencies", []):
            name = requirement.split("==")[0]
            if name in names:
                assert requirement == f"{name}=={workspace_version()}", (path, requirement)


def test_the_release_tool_notices_a_member_at_another_version() -> None:
    text = MEMBERS[0].read_text()
    names = release.member_names()
    assert release.stamped(text, workspace_version(), names) == text
    other = release.stamped(text, "9.9.9", names)
    assert other != text
    assert 'version = "9.9.9"' in other


def test_the_changelog_has_an_entry_for_this_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{workspace_version()}]" in changelog


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [*_uv(), "build", "--offline", "--quiet", "--wheel", "--all-packages", "-o", str(out)],
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    return out


def _metadata(wheel: Path) -> tuple[dict[str, list[str]], set[str]]:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        text = next(archive.read(n) for n in names if n.endswith(".dist-info/METADATA")).decode()
    message = Parser().parsestr(text)
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    fields["Description"] = [message.get_payload()]  # type: ignore[list-item]
    return fields, names


@pytest.mark.slow
def test_every_wheel_carries_version_licence_readme_urls_and_classifiers(wheels: Path) -> None:
    built = sorted(wheels.glob("*.whl"))
    assert len(built) == len(MEMBERS)
    for wheel in built:
        fields, names = _metadata(wheel)
        assert fields["Version"] == [workspace_version()], wheel.name
        assert fields["License-Expression"] == ["Apache-2.0"]
        assert {"LICENSE", "NOTICE"} <= set(fields["License-File"])
        assert any(n.endswith("/licenses/LICENSE") for n in names)
        assert "Apache License" in (ROOT / "LICENSE").read_text()
        assert fields["Description-Content-Type"] == ["text/markdown"]
        assert fields["Name"][0] in fields["Description"][0]
        urls = dict(url.split(", ", 1) for url in fields["Project-URL"])
        assert {"Homepage", "Repository", "Changelog"} <= set(urls)
        assert "License :: OSI Approved" not in " ".join(fields["Classifier"])  # PEP 639
        assert "Programming Language :: Python :: 3.11" in fields["Classifier"]
        assert fields["Requires-Python"] == [">=3.11"]


@pytest.mark.slow
def test_the_sidecar_wheel_installs_alone_and_starts(wheels: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv), "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    # The sidecar's third-party closure, exactly as locked, from uv's cache (no network) ...
    subprocess.run(
        [*_uv(), "sync", "--quiet", "--locked", "--offline", "--no-default-groups", *SIDECAR_ONLY],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    # ... then the sidecar from its wheel, its siblings resolved from the built wheels only.
    subprocess.run(
        [
            *_uv(),
            "pip",
            "install",
            "--quiet",
            "--offline",
            "--python",
            str(venv / "bin/python"),
            "--find-links",
            str(wheels),
            f"execpods-sidecar=={workspace_version()}",
        ],
        cwd=tmp_path,
        env=env,
        check=True,
        timeout=300,
    )
    installed = subprocess.run(
        [str(venv / "bin/python"), "-c", "import importlib.util as u; print(u.find_spec("
         "'execpods.kubesim'), u.find_spec('execpods.client'), u.find_spec('execpods.devtools'))"],
        cwd=tmp_path, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert installed.stdout.split() == ["None", "None", "None"]
    sidecar = venv / "bin" / "execpods-sidecar"
    version = subprocess.run(
        [str(sidecar), "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert version.stdout.strip() == f"execpods-sidecar {workspace_version()}"
    with KubeSim() as sim:
        command = [str(sidecar), "serve", "--app-id", "wheel", "--api-url", sim.url]
        command += ["--listen", "127.0.0.1:0", "--image", "spark:4.3.0", "--initial-executors", "1"]
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
        ) as process:
            try:
                assert process.stdout is not None
                line = process.stdout.readline()
                assert line.startswith("execpods-sidecar: listening on 127.0.0.1:"), (
                    line + process.communicate(timeout=30)[1]
                )
                # The first round runs on its own thread after the listener is up.
                assert eventually(sim.pods, timeout=30), "the installed sidecar created no pod"
            finally:
                process.terminate()
                process.wait(30)
        assert process.returncode == 0


def release_tags() -> dict[str, str]:
    """The CHANGELOG's release tags and their commits (its table at the end)."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    return dict(re.findall(r"^\| `(v\d+\.\d+\.\d+)` \| `([0-9a-f]{7,40})` \|$", changelog, re.M))


def test_every_release_in_the_changelog_names_its_git_tag_and_commit() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.MULTILINE)
    assert versions
    tags = release_tags()
    for version in versions:
        link = f"[{version}]: https://github.com/execpods/execpods/releases/tag/v{version}"
        assert link in changelog, version
        assert f"v{version}" in tags, f"no commit named for v{version}"
    assert "[Unreleased]: https://github.com/execpods/execpods/compare/v" in changelog
    for tag, commit in tags.items():
        shown = subprocess.run(
            ["git", "show", f"{commit}:pyproject.toml"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if shown.returncode != 0:
            pytest.skip(f"this clone has no history for {commit}")
        assert f'\nversion = "{tag[1:]}"\n' in shown.stdout, f"{tag} at {commit}"
