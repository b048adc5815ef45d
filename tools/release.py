#!/usr/bin/env python3
"""The workspace's one version: written in the root pyproject.toml, stamped into every member.

    python3 tools/release.py            # stamp the root's version into every member
    python3 tools/release.py 0.3.0      # set a new version, then stamp it
    python3 tools/release.py --check    # exit 1 when a member disagrees (run by the check)

The root `[project] version` is the single source. Each member's `version` and its pins on the
other members (`execpods-core==X`) are copies that this tool writes, as the code generators do,
and `--check` (tests/test_release.py) fails on drift: a wheel of one version never installs
beside another version's sibling. After a change, `python3 -m uv lock` records it in uv.lock.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEMBERS = sorted((ROOT / "packages").glob("*/pyproject.toml"))
_VERSION_LINE = re.compile(r'^version = "[^"]*"$', re.MULTILINE)
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?$")


def workspace_version() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return str(project["version"])


def member_names() -> list[str]:
    return [tomllib.loads(p.read_text(encoding="utf-8"))["project"]["name"] for p in MEMBERS]


def stamped(text: str, version: str, names: list[str]) -> str:
    """A member's pyproject with `version` and exact pins on every other member."""
    text = _VERSION_LINE.sub(f'version = "{version}"', text, count=1)
    for name in names:
        pin = rf'(?<!name = )"{re.escape(name)}(?:==[^"]*)?"'
        text = re.sub(pin, f'"{name}=={version}"', text)
    return text


def _set_root(version: str) -> None:
    path = ROOT / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    path.write_text(_VERSION_LINE.sub(f'version = "{version}"', text, count=1), encoding="utf-8")


def drifted(version: str) -> list[Path]:
    names = member_names()
    return [
        p
        for p in MEMBERS
        if p.read_text(encoding="utf-8") != stamped(p.read_text(), version, names)
    ]


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--check":
        stale = drifted(workspace_version())
        for path in stale:
            print(
                f"{path.relative_to(ROOT)}: not at version {workspace_version()}", file=sys.stderr
            )
        return 1 if stale else 0
    if argv:
        if not _SEMVER.match(argv[0]):
            print(f"not a release version: {argv[0]!r}", file=sys.stderr)
            return 2
        _set_root(argv[0])
    version = workspace_version()
    names = member_names()
    for path in MEMBERS:
        path.write_text(stamped(path.read_text(encoding="utf-8"), version, names), encoding="utf-8")
    print(f"every member at {version}; now run: python3 -m uv lock")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
