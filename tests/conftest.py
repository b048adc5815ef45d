"""The session's shared parts: the real API server (one per session), the heavy tests' lanes for
parallel runs (tests/lanes.py), and the faster start of the JVMs real-Spark tests run."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator

import pytest
from execpods.devtools import spark_cds
from execpods.devtools.realserver import gobuild
from execpods.devtools.realserver.server import RealServer
from hypothesis import settings

from tests import lanes

# Hypothesis' per-example deadline (200 ms) is a timing assertion: on a loaded machine, or beside
# the parallel check's other workers, one slow example fails a correct test ("Unreliable test
# timings"). Timing is the benchmarks' job (docs/benchmarks.md); every example still runs, and
# pytest-timeout still catches a hang.
settings.register_profile("execpods", deadline=None)
settings.load_profile("execpods")


def pytest_configure(config: pytest.Config) -> None:
    lanes.register(config)
    _faster_spark_starts()
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


def _faster_spark_starts() -> None:
    """The driver JVMs of real-Spark tests start with C1 alone and, once made, this
    environment's class-data sharing archive (execpods.devtools.spark_cds): the same Spark, a
    third of the CPU per start. ``spark-submit`` reads the options from SPARK_SUBMIT_OPTS."""
    if shutil.which("java") is None:
        return
    ours = spark_cds.java_options(spark_cds.archive_path())
    theirs = os.environ.get(spark_cds.ENV, "")
    if ours not in theirs:  # xdist's workers inherit the controller's environment
        os.environ[spark_cds.ENV] = f"{ours} {theirs}".strip()


def _make_spark_archive() -> None:
    try:
        spark_cds.build()
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        logging.getLogger(__name__).warning("no CDS archive for Spark's JVMs: %s", error)


@functools.cache
def _start_making_the_spark_archive() -> None:
    """Make the archive (about 15 s, once per environment) beside the first tests, so that the
    first JVM test finds it made or nearly (its build holds a file lock the tests wait on)."""
    if shutil.which("java") is None:
        return
    archive = spark_cds.archive_path()
    if archive is not None and not archive.exists():
        threading.Thread(target=_make_spark_archive, name="spark-cds").start()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """xdist's controller: a worker collected JVM tests (their ids end in their lane)."""
    if any("@jvm-" in nodeid for nodeid in ids):
        _start_making_the_spark_archive()


@functools.cache
def _spark_archive() -> None:
    _make_spark_archive()  # made already, or by another process holding its lock: at once
    _faster_spark_starts()


@pytest.fixture(autouse=True)
def _jvm_starts_quicker(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker(lanes.JVM) is not None:
        _spark_archive()


# -- the fidelity table's record (tools/fidelity.py) ------------------------------------------

_FIDELITY: dict[str, dict[str, str]] = {}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    lanes.arrange(items)
    in_worker = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    if not in_worker and any(item.get_closest_marker(lanes.JVM) for item in items):
        _start_making_the_spark_archive()
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
