"""Real Spark 4.3, side by side: its own allocator against the execpods plugin and sidecar (33).

Every scenario of `execpods.devtools.sidebyside.scenarios` runs twice on a fresh kubesim, once
with `spark.kubernetes.allocation.pods.allocator=direct` and once through the plugin, and the two
runs' executor pods (field by field) and API calls on executor pods are compared; a difference
fails the test unless `allowlist.toml` explains it. All applications share one JVM (a JVM start
is most of a real-Spark test's cost), with the registration-timeout test below.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from execpods.devtools.sidebyside.harness import SMALL, harness_jars, run_side_by_side
from execpods.devtools.sidebyside.run import PLUGIN, ScenarioRun, Timing
from execpods.devtools.sidebyside.scenarios import SCENARIOS, realistic_defaults
from execpods.devtools.sidebyside.sessions import SparkSessions
from execpods.kubesim import ClusterConfig

from tests.spark.support import PLUGIN_MARKS

pytestmark = PLUGIN_MARKS


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("side-by-side")


@pytest.fixture(scope="module")
def sessions(work: Path) -> Iterator[SparkSessions]:
    with SparkSessions(harness_jars(work)) as started:
        yield started


def test_the_scenarios_through_spark_s_own_allocator_and_through_the_plugin(
    sessions: SparkSessions, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = run_side_by_side(SCENARIOS, size=SMALL, work=work, sessions=sessions)
    with capsys.disabled():  # the check's output lists each scenario and what it compared
        print()
        for result in results:
            seconds = sum(result.seconds.values())
            print(f"side by side: {result.comparison.summary()} ({seconds:.0f} s)")
    for result in results:
        comparison = result.comparison
        assert comparison.fields_compared > 0, comparison.report()
        assert comparison.calls_compared > 0, comparison.report()
        assert comparison.pods[0] > 0, comparison.report()
    unexplained = [r.comparison.report() for r in results if r.comparison.unexplained]
    assert not unexplained, "\n".join(unexplained)


def test_an_executor_that_never_registers_is_replaced_through_the_plugin(
    sessions: SparkSessions, work: Path
) -> None:
    """The plugin reports Spark's registered executors to the sidecar (explicit mode) with
    spark.execpods.executor.registrationTimeout: executor 2's pod runs, its process never
    registers, and after the timeout the sidecar deletes it; its replacement registers."""
    app = "registration-timeout"
    conf = {
        **realistic_defaults(app, work),
        "spark.execpods.executor.registrationTimeout": "6s",
        "spark.execpods.registrations.intervalMs": "200",
    }
    run = ScenarioRun(
        mode=PLUGIN,
        sessions=sessions,
        app_id=app,
        spark_conf=conf,
        cluster=ClusterConfig(nodes=2, start_latency=0.2, start_jitter=0.0, stop_latency=0.2),
        plugin_jar=harness_jars(work)[0],
        timing=Timing(),
    )
    with run:
        run.never_register(2)
        run.start_app(**{"spark.executor.instances": "2"})

        def replaced(pods: list[Mapping[str, Any]]) -> bool:
            return run.stand_ins is not None and {1, 3} <= run.stand_ins.registered

        run.wait(replaced, "executor 2 replaced by a registered executor 3")
        assert run.sessions.call("executors")["ids"] == ["1", "3"]
        deleted = [
            r
            for r in run.sim.requests()
            if r.verb == "delete" and r.path.endswith(f"/{app}-exec-2")
        ]
        assert deleted, "the sidecar deleted the executor that never registered"
        assert deleted[0].user_agent.startswith("execpods-sidecar")
        assert run.sim.pod(f"{app}-exec-2") is None
        run.stop_app()
