"""Run one of tools/'s generators in check mode, as `tools/dev.py check` does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
