"""Which tests share a worker when the check runs them in parallel, and which go first.

``python3 tools/dev.py check`` runs the tests on several pytest-xdist workers with
``--dist loadgroup``. Most tests wait (on simulated latencies, on a process starting, on an API
server), so there are more workers than cores; a few resources are heavy, and their tests are
kept together rather than dealt out:

- ``@pytest.mark.jvm``: the test starts a JVM (real Spark). A JVM's start takes a core for
  seconds, and several at once on two cores starve each other past the tests' deadlines. JVM
  tests are dealt over ``EXECPODS_JVM_LANES`` lanes (2 unless set), each run by one worker, so
  no more JVMs run at once than there are lanes.
- ``@pytest.mark.real_server``, or the ``real_server`` fixture: the test uses the session's real
  API server. One worker runs them all, so the server starts once (and the tests, which share
  it, see each other's namespaces come and go as they would run one after another).
- a module-scoped fixture: the module's tests run on one worker, which builds the fixture once.

Groups go out biggest first (xdist's order for groups), so the long lanes start at once and the
other workers take the single tests, ``@pytest.mark.slow`` ones first, so that no long test is
left for the end. A test's own ``xdist_group`` mark wins over all of this.

Without ``-n``, none of it matters: the marks only group, and the order is collection's with slow
tests first.
"""

from __future__ import annotations

import os

import pytest

JVM = "jvm"
REAL_SERVER = "real_server"
LANES_ENV = "EXECPODS_JVM_LANES"

MARKERS = {
    JVM: "the test starts a JVM (real Spark): it runs in one of the JVM lanes (tests/lanes.py)",
    REAL_SERVER: "the test uses the session's real API server (fixture real_server), also "
    "through another fixture: one worker runs all of them (tests/lanes.py)",
}


def register(config: pytest.Config) -> None:
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


def _uses_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


def group_of(item: pytest.Item, jvm_lane: int) -> str | None:
    """The xdist group ``item`` belongs to (None: any worker); ``jvm_lane`` is the lane a JVM
    test would take."""
    fixtures = getattr(item, "fixturenames", ())
    if item.get_closest_marker(REAL_SERVER) is not None or "real_server" in fixtures:
        return "real-server"
    if item.get_closest_marker(JVM) is not None:
        return f"jvm-{jvm_lane}"
    if _uses_module_fixture(item):
        return item.nodeid.split("::", 1)[0]
    return None


def arrange(items: list[pytest.Item]) -> None:
    """Mark each heavy test with its group, and put slow tests first (in place)."""
    lanes = max(1, int(os.environ.get(LANES_ENV, "2")))
    jvm_tests = 0
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        group = group_of(item, jvm_tests % lanes)
        if group is None:
            continue
        if group.startswith("jvm-"):
            jvm_tests += 1
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
