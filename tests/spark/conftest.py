"""Shared by the real-Spark tests: the plugin jar, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from execpods.devtools.spark_plugin import build


@pytest.fixture(scope="session")
def plugin_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("plugin"))
