"""The real API server, shared by every test that proves against it (one per session)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from execpods.devtools.realserver import gobuild
from execpods.devtools.realserver.server import RealServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kubesim_only(reason): a conformance test that cannot run on a real API server; the "
        "reason is its entry in docs/kubesim.md's fidelity table",
    )


@pytest.fixture(scope="session")
def real_server() -> Iterator[RealServer]:
    """etcd + kube-apiserver + kube-controller-manager on loopback, built from source and cached
    (``python3 tools/dev.py gobuild``). Skipped when not built, unless ``EXECPODS_REAL_SERVER``
    is ``require`` (the check sets it after building): then a missing build fails."""
    missing = [n for n in gobuild.REAL_SERVER if gobuild.cached(n) is None]
    if missing:
        message = f"the real API server is not built ({', '.join(missing)}): run "
        message += "python3 tools/dev.py gobuild"
        if os.environ.get("EXECPODS_REAL_SERVER") == "require":
            pytest.fail(message)
        pytest.skip(message)
    with RealServer() as server:
        yield server


# -- the fidelity table's record (tools/fidelity.py) ------------------------------------------

_FIDELITY: dict[str, dict[str, str]] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not os.environ.get("EXECPODS_FIDELITY_OUT"):
        return
    for item in items:
        only = item.get_closest_marker("kubesim_only")
        entry = _FIDELITY.setdefault(item.nodeid, {"outcome": "not run"})
        if only is not None:
            entry["kubesim_only"] = str(only.kwargs.get("reason") or only.args[0])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not os.environ.get("EXECPODS_FIDELITY_OUT"):
        return
    entry = _FIDELITY.setdefault(report.nodeid, {"outcome": "not run"})
    if report.when == "call" or report.outcome != "passed":
        entry["outcome"] = report.outcome
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            entry["reason"] = str(report.longrepr[2])


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("EXECPODS_FIDELITY_OUT")
    if out:
        import json

        with open(out, "w", encoding="utf-8") as f:
            json.dump(_FIDELITY, f, indent=1, sort_keys=True)
