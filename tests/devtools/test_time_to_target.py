"""The time-to-target harness on kubesim's virtual clock: deterministic, so its claims are testable.

Not a timed test: the times are virtual, the same on any machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from execpods.devtools.bench.time_to_target import POLICIES, plot, report, run_policy


@pytest.mark.slow
def test_each_policy_reaches_the_target_in_order_and_within_the_rate_limit(tmp_path: Path) -> None:
    runs = [run_policy(policy, 120) for policy in POLICIES]
    rule_2018, spark, ours = runs
    assert all(run.seconds is not None for run in runs)
    assert all(run.creates == 120 for run in runs), "every executor created once"
    assert ours.seconds is not None
    assert spark.seconds is not None
    assert rule_2018.seconds is not None
    assert ours.seconds < spark.seconds < rule_2018.seconds
    assert ours.ratio is not None
    assert ours.ratio <= 1.25
    for run in runs:
        assert run.peak_rate <= run.rate_limit, f"{run.policy} went over the client's limit"
        assert run.curve[-1][1] == 120
    assert "execpods defaults" in report(runs)
    png = tmp_path / "ttt.png"
    plot(runs, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_are_reproducible() -> None:
    first = run_policy(POLICIES[2], 100)
    second = run_policy(POLICIES[2], 100)
    assert first.seconds == second.seconds
    assert first.curve == second.curve
