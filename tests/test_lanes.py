"""The parallel check's layout (tests/lanes.py): which tests share a worker, and which go first.

Collected in process by pytester from a small suite whose conftest applies the layout as the
project's does; what is read back is each test's xdist group and the order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import pytest
from tests import lanes

def pytest_configure(config):
    lanes.register(config)
    config.addinivalue_line("markers", "slow: long")

def pytest_collection_modifyitems(items):
    lanes.arrange(items)

@pytest.fixture(scope="session")
def real_server():
    return "a server"

@pytest.fixture(scope="module")
def built_once():
    return "built"
"""

SUITE = """
import pytest

def test_plain(): pass

@pytest.mark.jvm
def test_spark_a(): pass

@pytest.mark.jvm
def test_spark_b(): pass

@pytest.mark.jvm
def test_spark_c(): pass

def test_on_the_real_server(real_server): pass

@pytest.mark.real_server
def test_on_it_through_another_fixture(): pass

def test_with_a_module_fixture(built_once): pass

@pytest.mark.jvm
@pytest.mark.xdist_group("mine")
def test_with_its_own_group(): pass

@pytest.mark.slow
def test_slow(): pass
"""


class _Arranged:
    """Reads the items as the layout left them (after every other hook)."""

    def __init__(self) -> None:
        self.items: list[pytest.Item] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.items = list(items)


def _layout(pytester: pytest.Pytester) -> list[tuple[str, str | None]]:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    arranged = _Arranged()
    pytester.inline_run("--collect-only", "-p", "no:cacheprovider", plugins=[arranged])
    layout = []
    for item in arranged.items:
        mark = item.get_closest_marker("xdist_group")
        layout.append((item.name, str(mark.args[0]) if mark else None))
    return layout


def test_heavy_tests_get_their_groups_and_slow_ones_go_first(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECPODS_JVM_LANES", "2")
    assert _layout(pytester) == [
        ("test_slow", None),  # first: a slow single test is not left for the end
        ("test_plain", None),
        ("test_spark_a", "jvm-0"),  # JVM tests dealt over the two lanes
        ("test_spark_b", "jvm-1"),
        ("test_spark_c", "jvm-0"),
        ("test_on_the_real_server", "real-server"),  # one worker, one server
        ("test_on_it_through_another_fixture", "real-server"),
        ("test_with_a_module_fixture", "test_suite.py"),  # one worker builds it once
        ("test_with_its_own_group", "mine"),  # a test's own group wins
    ]


def test_one_lane_takes_every_jvm_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECPODS_JVM_LANES", "1")
    groups = dict(_layout(pytester))
    assert {groups[f"test_spark_{x}"] for x in "abc"} == {"jvm-0"}
