"""Fixtures of the real-Spark tests: the plugin jar (built once), and the certificates and token
of the sidecar's security tests."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from execpods.devtools.spark_plugin import build

from tests.sidecar.test_security import pki, token_file  # noqa: F401 (fixtures)


@pytest.fixture(scope="session")
def plugin_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once per run: parallel workers share the run's folder, and a file lock there lets
    one of them build while the others wait for its jar."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    with open(root / "plugin.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return build(root / "plugin")
