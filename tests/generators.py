"""Run one of tools/'s generators in check mode, as `tools/dev.py check` does, or load it to
test its parts."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def assert_not_stale(script: str) -> None:
    """`tools/<script> --check` passes: what it generates is what is committed."""
    completed = subprocess.run(
        [sys.executable, str(ROOT / "tools" / script), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def load_tool(script: str) -> ModuleType:
    """`tools/<script>` as a module (tools/ is no package), to call its functions directly."""
    path = ROOT / "tools" / script
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
