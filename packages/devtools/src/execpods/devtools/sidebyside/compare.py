"""Two recordings of one scenario compared pod by pod, field by field, and call by call.

Every difference is either listed in the allow-list (``allowlist.toml`` beside this module: one
reason per entry, each saying why the difference is deliberate) or reported. Pods are paired by
the order they were created in (the run's first executor pod with the other run's first); calls
are compared as multisets within each scenario step (the order of calls within a step depends on
thread timing in either allocator, which step they fall in does not).
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from execpods.devtools.sidebyside.record import Call, CreatedPod, Recording

__all__ = [
    "ALLOWLIST",
    "Allowance",
    "Comparison",
    "Difference",
    "compare",
    "load_allowlist",
]

ALLOWLIST = Path(__file__).with_name("allowlist.toml")


@dataclass(frozen=True, slots=True, kw_only=True)
class Allowance:
    """One allow-list entry: which differences it covers, and why they are deliberate."""

    kind: str
    """"field" (a pod field) or "call" (an API call only one run made)."""
    pattern: str
    """A glob on the field's path, or on the call ("verb resource target labels=... ...")."""
    reason: str
    scenarios: str = "*"
    """A glob on the scenario's name."""
    who: str = "*"
    """For calls: who made it ("spark", "sidecar"); a glob."""
    side: str = "*"
    """For calls: "direct" (made only by Spark's own allocator), "plugin", or "*"."""

    def covers(self, difference: Difference, scenario: str) -> bool:
        if difference.kind != self.kind or not fnmatch.fnmatchcase(scenario, self.scenarios):
            return False
        if self.kind == "call" and not (
            fnmatch.fnmatchcase(difference.who, self.who)
            and fnmatch.fnmatchcase(difference.side, self.side)
        ):
            return False
        return fnmatch.fnmatchcase(difference.what, self.pattern)


def load_allowlist(path: Path = ALLOWLIST) -> list[Allowance]:
    """The allow-list; every entry must give a reason."""
    data = tomllib.loads(path.read_text())
    entries = []
    for kind in ("field", "call"):
        for raw in data.get(kind, []):
            reason = str(raw.get("reason", "")).strip()
            if not reason:
                raise ValueError(f"{path}: the {kind} entry {raw} gives no reason")
            entries.append(
                Allowance(
                    kind=kind,
                    pattern=str(raw["pattern"]),
                    reason=reason,
                    scenarios=str(raw.get("scenarios", "*")),
                    who=str(raw.get("who", "*")),
                    side=str(raw.get("side", "*")),
                )
            )
    return entries


@dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    kind: str
    step: str
    what: str
    """The field's path ("pod #1 " is not part of it) or the call's key."""
    direct: str = ""
    plugin: str = ""
    who: str = ""
    side: str = ""
    """For calls: the run that made it ("direct" or "plugin")."""
    pod: int = 0
    count: int = 1
    allowed: str = ""
    """The allow-list's reason, when it covers this difference."""

    def describe(self) -> str:
        if self.kind == "run":
            return self.what
        if self.kind == "field":
            return (
                f"pod #{self.pod} ({self.step}) {self.what}: "
                f"direct={self.direct or '(absent)'} plugin={self.plugin or '(absent)'}"
            )
        times = f" x{self.count}" if self.count > 1 else ""
        return f"[{self.step}] only {self.side} ({self.who}){times}: {self.what}"


@dataclass(slots=True, kw_only=True)
class Comparison:
    scenario: str
    pods: tuple[int, int] = (0, 0)
    """Executor pods created: (direct, plugin)."""
    fields_compared: int = 0
    calls_compared: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.differences if not d.allowed]

    @property
    def allowed(self) -> list[Difference]:
        return [d for d in self.differences if d.allowed]

    def summary(self) -> str:
        return (
            f"{self.scenario}: {self.pods[0]}/{self.pods[1]} pods, "
            f"{self.fields_compared} fields and {self.calls_compared} calls compared, "
            f"{len(self.allowed)} allowed differences, {len(self.unexplained)} unexplained"
        )

    def report(self) -> str:
        lines = [self.summary()]
        lines += [f"  DIFF {d.describe()}" for d in self.unexplained]
        lines += [f"  allowed {d.describe()}  ({d.allowed})" for d in self.allowed]
        return "\n".join(lines)


def _pod_fields(pod: CreatedPod) -> dict[str, str]:
    return {**pod.fields, "(executor id)": str(pod.executor_id), "(created in step)": pod.step}


def _compare_pods(
    direct: Sequence[CreatedPod], plugin: Sequence[CreatedPod]
) -> tuple[int, list[Difference]]:
    compared, found = 0, []
    for index in range(max(len(direct), len(plugin))):
        a = direct[index] if index < len(direct) else None
        b = plugin[index] if index < len(plugin) else None
        if a is None or b is None:
            present = a or b
            assert present is not None
            found.append(
                Difference(
                    kind="field",
                    step=present.step,
                    what="(the pod itself)",
                    direct="created" if a else "",
                    plugin="created" if b else "",
                    pod=index + 1,
                )
            )
            continue
        fa, fb = _pod_fields(a), _pod_fields(b)
        for path in sorted(fa.keys() | fb.keys()):
            compared += 1
            if fa.get(path) != fb.get(path):
                found.append(
                    Difference(
                        kind="field",
                        step=a.step,
                        what=path,
                        direct=fa.get(path, ""),
                        plugin=fb.get(path, ""),
                        pod=index + 1,
                    )
                )
    return compared, found


def _surplus_makers(
    key: str, made: Counter[tuple[str, str]], other: Counter[tuple[str, str]]
) -> str:
    """Who made the calls one run has more of: a maker as many times in both runs (Spark's own
    calls, through the plugin too) is not who made the surplus."""
    makers = {w for (w, k) in made if k == key}
    surplus = sorted(w for w in makers if made[(w, key)] > other[(w, key)])
    return ",".join(surplus or sorted(makers))


def _compare_calls(direct: Sequence[Call], plugin: Sequence[Call]) -> list[Difference]:
    found = []
    steps = list(dict.fromkeys([c.step for c in direct] + [c.step for c in plugin]))
    for step in steps:
        a = Counter((c.who, c.key()) for c in direct if c.step == step)
        b = Counter((c.who, c.key()) for c in plugin if c.step == step)
        # A call is the same whoever made it (Spark, or the sidecar in its place).
        by_key_a = Counter(k for (_, k) in a.elements())
        by_key_b = Counter(k for (_, k) in b.elements())
        for side, mine, theirs, made, other in (
            ("direct", by_key_a, by_key_b, a, b),
            ("plugin", by_key_b, by_key_a, b, a),
        ):
            for key, count in sorted((mine - theirs).items()):
                found.append(
                    Difference(
                        kind="call",
                        step=step,
                        what=key,
                        who=_surplus_makers(key, made, other),
                        side=side,
                        count=count,
                    )
                )
    return found


def compare(
    scenario: str,
    direct: Recording,
    plugin: Recording,
    allowlist: Sequence[Allowance],
) -> Comparison:
    """Compare one scenario's two runs and apply the allow-list."""
    compared, differences = _compare_pods(direct.pods, plugin.pods)
    differences += _compare_calls(direct.calls, plugin.calls)
    for recording in (direct, plugin):
        if recording.failure:
            differences.append(
                Difference(
                    kind="run",
                    step="",
                    what=f"the {recording.mode} run did not finish: {recording.failure}",
                    side=recording.mode,
                )
            )
    explained = []
    for difference in differences:
        reason = next((a.reason for a in allowlist if a.covers(difference, scenario)), "")
        explained.append(
            Difference(
                kind=difference.kind,
                step=difference.step,
                what=difference.what,
                direct=difference.direct,
                plugin=difference.plugin,
                who=difference.who,
                side=difference.side,
                pod=difference.pod,
                count=difference.count,
                allowed=reason,
            )
        )
    return Comparison(
        scenario=scenario,
        pods=(len(direct.pods), len(plugin.pods)),
        fields_compared=compared,
        calls_compared=len(direct.calls) + len(plugin.calls),
        differences=explained,
    )
