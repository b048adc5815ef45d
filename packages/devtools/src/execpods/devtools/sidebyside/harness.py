"""Run the side-by-side scenarios under both allocators in one JVM and compare them.

    python -m execpods.devtools.sidebyside                 # every scenario at the check's size
    python -m execpods.devtools.sidebyside --size 20       # the larger size
    python -m execpods.devtools.sidebyside --scenario claims --out /tmp/sbs   # keep recordings

One JVM runs every application (Spark's own allocator, then the plugin, scenario after scenario),
each on a fresh simulated cluster, so the cost of a JVM start is paid once. Exit status 1 when a
difference is neither fixed nor allow-listed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from execpods.devtools.sidebyside.compare import Comparison, compare, load_allowlist
from execpods.devtools.sidebyside.record import Recording, record_run
from execpods.devtools.sidebyside.run import DIRECT, PLUGIN, ScenarioRun, Timing
from execpods.devtools.sidebyside.scenarios import SCENARIOS, Scenario, realistic_defaults
from execpods.devtools.sidebyside.sessions import SessionError, SparkSessions
from execpods.devtools.spark_plugin import build, build_testkit

__all__ = ["SMALL", "SideBySide", "main", "run_side_by_side", "harness_jars"]

SMALL = 2
"""The check's size: executors per scenario (a few more where a scenario scales up)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SideBySide:
    scenario: Scenario
    comparison: Comparison
    recordings: dict[str, Recording]
    seconds: dict[str, float]


def harness_jars(work: Path) -> list[Path]:
    """The plugin's jar and the test kit's (simulated executors), built under ``work``."""
    return [build(work / "jars"), build_testkit(work / "jars")]


def run_side_by_side(
    scenarios: Sequence[Scenario],
    *,
    size: int,
    work: Path,
    sessions: SparkSessions | None = None,
    timing: Timing | None = None,
    progress: bool = False,
) -> list[SideBySide]:
    """Run each scenario with Spark's own allocator, then through the plugin, and compare. The
    applications run in ``sessions`` (its JVM needs `harness_jars` on its class path), else in a
    JVM of their own."""
    jars = harness_jars(work)
    if sessions is None:
        with SparkSessions(jars) as own:
            return run_side_by_side(
                scenarios, size=size, work=work, sessions=own, timing=timing, progress=progress
            )
    allowlist = load_allowlist()
    results = []
    for scenario in scenarios:
        recordings: dict[str, Recording] = {}
        seconds: dict[str, float] = {}
        for mode in (DIRECT, PLUGIN):
            began = time.monotonic()
            app_id = f"sbs-{scenario.name}"
            run = ScenarioRun(
                mode=mode,
                sessions=sessions,
                app_id=app_id,
                spark_conf={**realistic_defaults(app_id, work), **scenario.conf},
                cluster=scenario.cluster,
                plugin_jar=jars[0],
                timing=timing or Timing(),
            )
            failure = ""
            with run:
                try:
                    scenario.script(run, size)
                except (TimeoutError, SessionError) as error:
                    failure = str(error).splitlines()[0]
            recordings[mode] = record_run(mode, run.records, run.steps)
            recordings[mode].failure = failure
            seconds[mode] = time.monotonic() - began
            if progress:
                print(f"  {scenario.name} ({mode}): {seconds[mode]:.1f} s", flush=True)
        comparison = compare(scenario.name, recordings[DIRECT], recordings[PLUGIN], allowlist)
        results.append(
            SideBySide(
                scenario=scenario, comparison=comparison, recordings=recordings, seconds=seconds
            )
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=SMALL, help="executors per scenario")
    parser.add_argument("--scenario", action="append", default=[], help="only these scenarios")
    parser.add_argument("--out", type=Path, help="write each run's recording here (JSON)")
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    if not chosen:
        parser.error(f"no such scenario; known: {', '.join(s.name for s in SCENARIOS)}")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="execpods-sidebyside-") as tmp:
        results = run_side_by_side(chosen, size=args.size, work=Path(tmp), progress=True)
    unexplained = 0
    for result in results:
        print(result.comparison.report())
        unexplained += len(result.comparison.unexplained)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            for mode, recording in result.recordings.items():
                path = args.out / f"{result.scenario.name}.{mode}.json"
                path.write_text(json.dumps(recording.as_json(), indent=1))
    print(f"side by side: {len(results)} scenarios at size {args.size} in "
          f"{time.monotonic() - began:.0f} s, {unexplained} unexplained differences")  # fmt: skip
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
