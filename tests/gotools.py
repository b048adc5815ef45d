"""Go programs the tests run (helm, buf): built from the Go module proxy, pinned under
tools/gobuild and cached outside the checkout by `execpods.devtools.realserver.gobuild`
(`python3 tools/dev.py gobuild NAME`); `EXECPODS_<NAME>` or PATH first."""

from __future__ import annotations

import importlib
import os
import shutil

import pytest


def go_program(name: str) -> str:
    """The program's binary, or skip saying how to get it."""
    found = os.environ.get(f"EXECPODS_{name.upper()}") or shutil.which(name)
    if found:
        return found
    try:
        gobuild = importlib.import_module("execpods.devtools.realserver.gobuild")
    except ImportError:
        pytest.skip(f"{name} is not installed, and this checkout has no pinned Go builds")
    if name in gobuild.PROGRAMS and (cached := gobuild.cached(name)) is not None:
        return str(cached)
    pytest.skip(f"{name} is not built: python3 tools/dev.py gobuild {name} (minutes, then cached)")
