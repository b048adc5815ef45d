"""Fixtures of the real-Spark tests: the plugin jar (built once), and the certificates and token
of the sidecar's security tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from execpods.devtools.spark_plugin import build

from tests.sidecar.test_security import pki, token_file  # noqa: F401 (fixtures)


@pytest.fixture(scope="session")
def plugin_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("plugin"))
