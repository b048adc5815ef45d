"""buf's lint and breaking checks on proto/ (buf.yaml): the contract keeps buf's STANDARD style
(with two documented exceptions) and stays wire- and JSON-compatible with the last release.

The last release is the tag the CHANGELOG names (`v0.2.0`), or its commit when this clone has no
tags. buf is a Go program (tests/gotools.py: pinned in tools/gobuild/buf, or EXECPODS_BUF).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.gotools import go_program
from tests.test_release import release_tags

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def buf() -> str:
    return go_program("buf")


def _run(buf: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [buf, *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=120
    )


def test_buf_lint_passes(buf: str) -> None:
    done = _run(buf, "lint")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_contract_is_wire_compatible_with_the_last_release(buf: str) -> None:
    tags = release_tags()
    last = max(tags, key=lambda t: tuple(int(p) for p in t[1:].split(".")))
    has_tag = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"refs/tags/{last}"], cwd=ROOT, check=False
    )
    ref = f"tag={last}" if has_tag.returncode == 0 else f"ref={tags[last]}"
    # buf clones the repository 50 commits deep unless told: a release further back than that
    # was not found ("pathspec ... did not match") once main had grown past it.
    count = subprocess.run(
        ["git", "rev-list", "--count", "HEAD"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    depth = max(50, int(count.stdout.strip()))
    done = _run(buf, "breaking", "--against", f".git#{ref},subdir=proto,depth={depth}")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_breaking_change_would_be_caught(buf: str, tmp_path: Path) -> None:
    """Renumbering a field of the released contract is what the check exists to refuse."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "proto", copy / "proto")
    shutil.copy(ROOT / "buf.yaml", copy / "buf.yaml")
    proto = copy / "proto" / "execpods" / "v1" / "allocator.proto"
    text = proto.read_text(encoding="utf-8")
    proto.write_text(
        text.replace("int32 resource_profile_id = 3;", "int32 resource_profile_id = 30;")
    )
    done = subprocess.run(
        [buf, "breaking", "proto", "--against", str(ROOT / "proto")],
        cwd=copy, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "resource_profile_id" in done.stdout + done.stderr
