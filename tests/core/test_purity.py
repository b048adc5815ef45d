"""The core is pure: importing it starts no thread and pulls in no network or process modules.

import-linter (see the root pyproject) proves the core names no client library; this proves the
whole import graph, standard library included, stays free of I/O machinery.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, pkgutil, sys, threading
before_modules = set(sys.modules)
before_threads = threading.active_count()
import execpods.core
for info in pkgutil.walk_packages(execpods.core.__path__, "execpods.core."):
    __import__(info.name)
print(json.dumps({
    "threads": threading.active_count() - before_threads,
    "modules": sorted(set(sys.modules) - before_modules),
}))
"""

FORBIDDEN = ("socket", "ssl", "http", "urllib", "subprocess", "asyncio", "selectors", "select")


def test_importing_every_core_module_starts_no_thread_and_no_io_machinery() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    report = json.loads(result.stdout)
    assert report["threads"] == 0
    loaded = report["modules"]
    assert "execpods.core.allocator" in loaded, "the probe must really import the core"
    offenders = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert offenders == []
    assert not [m for m in loaded if m.split(".")[0] in ("kubernetes", "grpc", "google")]
