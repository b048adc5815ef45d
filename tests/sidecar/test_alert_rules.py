"""Every alert of deploy/monitoring/prometheusrule.yaml, with `promtool test rules`: each one fires
on what it says and stays quiet on its opposite.

The series are the ones a live sidecar exposes: the dashboard's scenario (test_dashboard.py:
executors run, a bad RPC, a refused create, a driver kill, an OOM kill, a 429) is scraped, and
each case below takes its metric names and label sets from that scrape (a renamed metric or
label fails here, not silently in Prometheus) and its values from what the scenario did. The
PodMonitor's target labels (namespace, pod, job) are added, as Prometheus adds them. promtool is
Debian's `prometheus` package (the bootstrap installs it, as it installs Java).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from execpods.core import ApiThrottled
from execpods.k8s import ApiHeldBack
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import SidecarFactory
from tests.sidecar.test_dashboard import dashboard_scenario
from tests.sidecar.test_observability import Samples

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "monitoring" / "prometheusrule.yaml"
TARGET = {"namespace": "spark", "pod": "spark-pi-driver", "job": "spark/execpods"}
Labels = dict[str, str]
Series = tuple[str, Labels, str]  # name, labels, promtool's values notation


def _normalised(samples: Samples) -> dict[str, list[tuple[Labels, float]]]:
    """The scrape by metric name: [(labels, value)]."""
    by_name: dict[str, list[tuple[Labels, float]]] = {}
    for (name, pairs), value in samples.items():
        by_name.setdefault(name, []).append((dict(pairs), value))
    return by_name


@dataclass
class Live:
    """The two scrapes of the scenario: before and after its events."""

    before: dict[str, list[tuple[Labels, float]]]
    after: dict[str, list[tuple[Labels, float]]]

    def labels(self, name: str, **wanted: str) -> Labels:
        """The label set of a live series of `name` that has `wanted` (fails when none has)."""
        for labels, _ in self.after.get(name, []):
            if all(labels.get(k) == v for k, v in wanted.items()):
                return labels
        served = sorted(
            {labels.get(k, "") for labels, _ in self.after.get(name, []) for k in wanted}
        )
        pytest.fail(f"no live series {name}{wanted}; served: {served or 'no such metric'}")

    def delta(self, name: str, **wanted: str) -> float:
        def value(scrape: dict[str, list[tuple[Labels, float]]]) -> float:
            matching = [
                v
                for ls, v in scrape.get(name, [])
                if all(ls.get(k) == w for k, w in wanted.items())
            ]
            return sum(matching)

        return value(self.after) - value(self.before)

    def buckets(self, name: str, **wanted: str) -> list[Labels]:
        """Every `le` series of one live histogram (other labels as `wanted`, else the first)."""
        first = self.labels(f"{name}_bucket", **wanted)
        rest = {k: v for k, v in first.items() if k != "le"}
        return [
            ls
            for ls, _ in self.after[f"{name}_bucket"]
            if {k: v for k, v in ls.items() if k != "le"} == rest
        ]


@dataclass
class Case:
    """One promtool test: series, and whether `alert` fires at `at` minutes."""

    alert: str
    fires: bool
    at: int
    series: list[Series] = field(default_factory=list)

    def name(self) -> str:
        return f"{self.alert} {'fires' if self.fires else 'stays quiet'}"


def _series(name: str, labels: Labels, values: str) -> Series:
    return name, {**labels, **{k: v for k, v in TARGET.items() if k != "job"}}, values


def _histogram(live: Live, name: str, slow: bool, **wanted: str) -> list[Series]:
    """A histogram whose every observation lands above 1 s (slow) or below 0.1 s, 10 a minute."""
    out = []
    for labels in live.buckets(name, **wanted):
        le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
        counted = le == float("inf") or (le > 1.0 if slow else le >= 0.1)
        out.append(_series(f"{name}_bucket", labels, "0+10x40" if counted else "0x40"))
    rest = {k: v for k, v in live.buckets(name, **wanted)[0].items() if k != "le"}
    out.append(_series(f"{name}_count", rest, "0+10x40"))
    return out


def cases(live: Live) -> list[Case]:
    """Each alert's firing case and its opposite, from the live series."""
    oom = live.labels("execpods_executor_removals_total", cause="oom_killed")
    assert live.delta("execpods_executor_removals_total", cause="oom_killed") == 1
    killed = live.labels("execpods_executor_removals_total", reason="killed_by_driver")
    # The scenario's 403 (an admission webhook); a create's 429 is counted under the error's
    # class, ApiThrottled, or ApiHeldBack for one held back after a 429 (the scenario's 429 may
    # land on another call, so these two take the live label set with their reason).
    forbidden = live.labels("execpods_pods_refused_total", reason="PodAdmissionRejected")
    throttled_refusals = [
        {**forbidden, "reason": error.__name__} for error in (ApiThrottled, ApiHeldBack)
    ]
    assert live.delta("execpods_pods_refused_total", reason="PodAdmissionRejected") == 1
    counted = live.labels("execpods_executor_failures_counted")
    limit_labels = live.labels("execpods_executor_failures_limit")
    limit = int(next(v for ls, v in live.after["execpods_executor_failures_limit"]))
    target = live.labels("execpods_target_executors")
    running = live.labels("execpods_executors", state="running")
    success = live.labels("execpods_api_calls_total", outcome="success")
    failed = {**success, "outcome": "ApiThrottled"}
    throttled = live.labels("execpods_api_throttled_total")
    grpc_ok = live.labels("grpc_server_handled_total", grpc_method="RequestTotal", grpc_code="OK")
    invalid = live.labels("grpc_server_handled_total", grpc_code="InvalidArgument")
    refused = {**grpc_ok, "grpc_code": "Unauthenticated"}
    up = {"instance": "10.244.0.7:9464", "job": TARGET["job"]}

    def step(v: float) -> str:
        """0 for 10 minutes, then `v`: the scenario's change at minute 10."""
        return f"0x10 {v:g}x30"

    removals, refusals = "execpods_executor_removals_total", "execpods_pods_refused_total"
    calls, handled = "execpods_api_calls_total", "grpc_server_handled_total"
    slow_api, limiter = (
        "execpods_api_call_duration_seconds",
        "rest_client_rate_limiter_duration_seconds",
    )
    return [
        *pair("ExecpodsExecutorsOOMKilled", 12,
              fires=[_series(removals, oom, step(1))],
              quiet=[_series(removals, killed, step(1))]),
        *pair("ExecpodsCloseToFailureLimit", 12,
              fires=[_series("execpods_executor_failures_counted", counted, step(limit)),
                     _series("execpods_executor_failures_limit", limit_labels, f"{limit}x40")],
              quiet=[_series("execpods_executor_failures_counted", counted, step(limit // 2)),
                     _series("execpods_executor_failures_limit", limit_labels, f"{limit}x40")]),
        # A plain 429 is throttling, not a refusal of the pod: that stays quiet.
        *pair("ExecpodsCreatesRefused", 12,
              fires=[_series(refusals, forbidden, step(1))],
              quiet=[_series(refusals, labels, step(5)) for labels in throttled_refusals]),
        *pair("ExecpodsTargetNotReached", 22,
              fires=[_series("execpods_target_executors", target, "3x40"),
                     _series("execpods_executors", running, "3x10 2x30")],
              quiet=[_series("execpods_target_executors", target, "3x40"),  # replaced in 5 min
                     _series("execpods_executors", running, "3x10 2x5 3x25")]),
        *pair("ExecpodsSidecarDown", 14,
              fires=[("up", {**up, **TARGET}, "1x10 0x30")],
              quiet=[("up", {**up, **TARGET}, "1x40")]),
        *pair("ExecpodsKubernetesApiErrors", 25,
              fires=[_series(calls, success, "0+90x40"), _series(calls, failed, "0+10x40")],
              quiet=[_series(calls, success, "0+99x40"), _series(calls, failed, "0+1x40")]),
        *pair("ExecpodsSlowKubernetesApi", 25,
              fires=_histogram(live, slow_api, True, verb="create"),
              quiet=_histogram(live, slow_api, False, verb="create")),
        *pair("ExecpodsApiServerThrottling", 12,
              fires=[_series("execpods_api_throttled_total", throttled, step(1))],
              quiet=[_series("execpods_api_throttled_total", throttled, "0x40")]),
        *pair("ExecpodsClientRateLimited", 25,
              fires=_histogram(live, limiter, True),
              quiet=_histogram(live, limiter, False)),
        *pair("ExecpodsDriverCallsRefused", 12,
              fires=[_series(handled, refused, "0+1x40")],
              quiet=[_series(handled, grpc_ok, "0+1x40")]),
        # Refusals are the other alert's: this one stays quiet on them.
        *pair("ExecpodsDriverCallsFailing", 12,
              fires=[_series(handled, invalid, "0+1x40")],
              quiet=[_series(handled, refused, "0+1x40")]),
    ]  # fmt: skip


def pair(alert: str, at: int, *, fires: list[Series], quiet: list[Series]) -> list[Case]:
    """An alert's two cases: it fires at minute `at` on one set of series, not on the other."""
    return [Case(alert, True, at, fires), Case(alert, False, at, quiet)]


def _rules() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text(encoding="utf-8"))["spec"][
        "groups"
    ]
    return groups


def _expected(rule: dict[str, Any], case: Case) -> list[dict[str, Any]]:
    """The alert promtool must see: the rule's labels, the `by` labels of its expression taken
    from the case's series, and its annotations with `{{ $labels.X }}` filled in."""
    if not case.fires:
        return []
    by = re.findall(r"by \(([^)]*)\)", rule["expr"])
    keys = {k.strip() for group in by for k in group.split(",")} - {"le"} or set()
    series_labels = case.series[0][1]
    if rule["expr"].startswith("up"):
        keys = set(series_labels)
    labels = {k: series_labels[k] for k in keys if k in series_labels}
    if "verb" in keys:
        labels["verb"] = next(ls["verb"] for _, ls, _ in case.series if "verb" in ls)
    labels |= rule.get("labels", {})
    fill: Callable[[str], str] = lambda text: re.sub(  # noqa: E731
        r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text
    )
    annotations = {k: fill(v) for k, v in rule.get("annotations", {}).items()}
    return [{"exp_labels": labels, "exp_annotations": annotations}]


def promtool_tests(live: Live, rules_file: str) -> dict[str, Any]:
    by_alert = {r["alert"]: r for g in _rules() for r in g["rules"]}
    tests = []
    for case in cases(live):
        rule = by_alert[case.alert]
        tests.append(
            {
                "name": case.name(),
                "interval": "1m",
                "input_series": [
                    {
                        "series": name
                        + "{"
                        + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                        + "}",
                        "values": values,
                    }
                    for name, labels, values in case.series
                ],
                "alert_rule_test": [
                    {
                        "eval_time": f"{case.at}m",
                        "alertname": case.alert,
                        "exp_alerts": _expected(rule, case),
                    }
                ],
            }
        )
    return {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": tests}


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is missing (Debian's prometheus package; tools/dev.py installs it)")
    return found


def test_promtool_checks_the_rules(promtool: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": _rules()}))
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in _rules())} rules found" in done.stdout


def test_each_alert_fires_on_what_it_says_and_not_on_its_opposite(
    promtool: str, sim: KubeSim, make_sidecar: SidecarFactory, tmp_path: Path
) -> None:
    before, after = dashboard_scenario(sim, make_sidecar)
    live = Live(before=_normalised(before), after=_normalised(after))
    alerts = {r["alert"] for g in _rules() for r in g["rules"]}
    covered = {(c.alert, c.fires) for c in cases(live)}
    assert covered == {(a, f) for a in alerts for f in (True, False)}  # both ways, every alert
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _rules()}))
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump(promtool_tests(live, "rules.yaml"), sort_keys=False))
    done = subprocess.run(
        [promtool, "test", "rules", str(tests)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_operations_doc_lists_exactly_the_rules_alerts() -> None:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("## Alerts worth having", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(Execpods\w+)` \|", section, re.MULTILINE))
    assert listed == {r["alert"] for g in _rules() for r in g["rules"]}
