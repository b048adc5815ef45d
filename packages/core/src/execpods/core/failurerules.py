"""Failure rules: what a failed executor means, in the spirit of a Job's podFailurePolicy.

A Job's `podFailurePolicy` is an ordered list of rules; the first rule whose requirement a failed
pod meets decides what its failure does: `FailJob`, `Ignore` (not counted toward backoffLimit)
or `Count`; a pod no rule matches is counted. Here the same, for executors and
`spark.executor.maxNumFailures`, one property a rule:

    execpods.executor.failureRules.1=FailApplication onExitCodes In 126,127
    execpods.executor.failureRules.2=Ignore onPodConditions DisruptionTarget
    execpods.executor.failureRules.3=Count onExitCodes container=* NotIn 0

- `<action>` is `FailApplication` (the application fails at once: a configuration error such as
  a missing command, exit 126/127, will not mend by retrying), `Ignore` (not counted: the
  cluster's doing, a preemption) or `Count` (counted toward maxNumFailures, the default);
- `onExitCodes [container=<name>|container=*] In|NotIn <codes>` matches when a container that
  terminated with a non-zero code (exit 0 never matches, as in a Job) has a code in (`In`) or
  not in (`NotIn`) the list. Without `container=`, only the executor container
  (`spark.kubernetes.executor.podTemplateContainerName`) counts, since it speaks for the executor
  (SPARK-49804); `container=*` checks every container and init container, as a Job's rule
  without `containerName` does;
- `onPodConditions <Type>[=<True|False|Unknown>][,...]` matches when the pod has a condition of
  that type and status (True when unnamed). `DisruptionTarget` also matches pods whose
  `status.reason` says Kubernetes ended them (Evicted, Preempting...: clusters before 1.26, the
  kubelet's own evictions), as `execpods.executor.countDisruptions` always has.

Rules are numbered; they apply in ascending number. `execpods.executor.countDisruptions=false`
(the default) is the rule `Ignore onPodConditions DisruptionTarget` ahead of them all, so the
defaults (no rules) reproduce what execpods did before rules existed: disruptions are not
counted, every other failure is. A `Count`/`FailApplication` rule on `DisruptionTarget` alone
could then never apply, so it fails start-up (`check_rules`) rather than doing nothing. An
executor the driver killed is never a failure, whatever the rules say. The rules are
`CoreSettings.failure_rules`; one that cannot be read fails start-up with an error naming its
property.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from execpods.core.errors import SettingsError
from execpods.core.pods import ContainerTerminated, ExecutorPod
from execpods.core.states import disruption_of

__all__ = [
    "FAILURE_RULES_PREFIX",
    "ExitCodeRule",
    "FailureAction",
    "FailureDecision",
    "FailureRule",
    "FailureRules",
    "PodConditionRule",
    "check_rules",
    "parse_rule",
    "parse_rules",
    "rule_number",
]

FAILURE_RULES_PREFIX = "execpods.executor.failureRules."
MAX_RULES = 20
"""As a Job's podFailurePolicy: at most 20 rules, 20 condition patterns a rule, 255 codes."""
MAX_PATTERNS = 20
MAX_CODES = 255
ANY_CONTAINER = "*"
DISRUPTION_TARGET = "DisruptionTarget"
_STATUSES = ("True", "False", "Unknown")
_INT32 = range(-(2**31), 2**31)


class FailureAction(enum.Enum):
    """What a failed executor's failure does."""

    FAIL_APPLICATION = "FailApplication"
    """The application fails at once (allocation stops, the stream says why)."""
    IGNORE = "Ignore"
    """Not counted toward spark.executor.maxNumFailures; the executor is replaced."""
    COUNT = "Count"
    """Counted toward spark.executor.maxNumFailures (what no rule matching means)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExitCodeRule:
    """`onExitCodes`: a terminated container's non-zero exit code in (or not in) `codes`."""

    container: str | None
    """The container whose code counts; None: the executor container; `*`: any container."""
    operator: str
    """"In" or "NotIn"."""
    codes: frozenset[int]

    def matches(self, pod: ExecutorPod, executor_container: str) -> bool:
        name = executor_container if self.container is None else self.container
        for status in (*pod.container_statuses, *pod.init_container_statuses):
            if name not in (ANY_CONTAINER, status.name):
                continue
            state = status.state
            if not isinstance(state, ContainerTerminated) or state.exit_code == 0:
                continue
            if (state.exit_code in self.codes) == (self.operator == "In"):
                return True
        return False

    def describe(self) -> str:
        where = "" if self.container is None else f" container={self.container}"
        codes = ",".join(str(code) for code in sorted(self.codes))
        return f"onExitCodes{where} {self.operator} {codes}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodConditionRule:
    """`onPodConditions`: the pod has a condition of one of these (type, status) patterns."""

    patterns: tuple[tuple[str, str], ...]

    def matches(self, pod: ExecutorPod) -> bool:
        for kind, status in self.patterns:
            if kind == DISRUPTION_TARGET and status == "True" and disruption_of(pod) is not None:
                return True
            if any(c.type == kind and c.status == status for c in pod.conditions):
                return True
        return False

    def describe(self) -> str:
        shown = (kind if status == "True" else f"{kind}={status}" for kind, status in self.patterns)
        return f"onPodConditions {','.join(shown)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureRule:
    """One rule: an action and the requirement a failed pod must meet for it to apply."""

    action: FailureAction
    requirement: ExitCodeRule | PodConditionRule
    source: str
    """Where the rule comes from: its property (`execpods.executor.failureRules.2`), or the
    setting that implies it."""

    def matches(self, pod: ExecutorPod, executor_container: str) -> bool:
        if isinstance(self.requirement, ExitCodeRule):
            return self.requirement.matches(pod, executor_container)
        return self.requirement.matches(pod)

    def describe(self) -> str:
        return f"{self.action.value} {self.requirement.describe()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureDecision:
    """What a failed executor's failure does, and the rule that decided (None: no rule matched,
    the failure counts)."""

    action: FailureAction
    rule: FailureRule | None = None

    @property
    def counted(self) -> bool:
        """Whether the failure spends the failure budget (Count and FailApplication do)."""
        return self.action is not FailureAction.IGNORE

    def explain(self) -> str:
        if self.rule is None:
            return "no failure rule matched: counted"
        return f"{self.rule.source} ({self.rule.describe()})"


_ACTIONS = {action.value.lower(): action for action in FailureAction}
_CONDITION = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_./]*)(?:=([A-Za-z]+))?$")


def _codes(text: str) -> frozenset[int]:
    values: list[int] = []
    for raw in text.split(","):
        item = raw.strip()
        try:
            code = int(item)
        except ValueError:
            raise ValueError(f"{item!r} is not an exit code (an integer)") from None
        if code not in _INT32:
            raise ValueError(f"exit code {code} is not a 32-bit integer")
        values.append(code)
    if len(set(values)) != len(values):
        raise ValueError("the exit codes must not repeat")
    if len(values) > MAX_CODES:
        raise ValueError(f"at most {MAX_CODES} exit codes are allowed, not {len(values)}")
    return frozenset(values)


def _exit_code_rule(words: list[str]) -> ExitCodeRule:
    container: str | None = None
    if words and words[0].lower().startswith("container="):
        container = words.pop(0).partition("=")[2]
        if not container:
            raise ValueError("container= needs a container name, or * for any container")
    if len(words) != 2:
        raise ValueError(
            "onExitCodes takes [container=<name>|container=*] In|NotIn <code>,<code>...: "
            "an operator and a comma-separated list without spaces"
        )
    operator = {"in": "In", "notin": "NotIn"}.get(words[0].lower())
    if operator is None:
        raise ValueError(f"the operator must be In or NotIn, not {words[0]!r}")
    codes = _codes(words[1])
    if operator == "In" and 0 in codes:
        raise ValueError("exit code 0 cannot be used with In (a container that succeeded)")
    return ExitCodeRule(container=container, operator=operator, codes=codes)


def _condition_rule(words: list[str]) -> PodConditionRule:
    if len(words) != 1:
        raise ValueError(
            "onPodConditions takes <Type>[=True|False|Unknown],... (comma-separated, no spaces)"
        )
    patterns: list[tuple[str, str]] = []
    for item in words[0].split(","):
        match = _CONDITION.match(item.strip())
        if match is None:
            raise ValueError(f"{item!r} is not a condition type[=status]")
        kind, status = match.group(1), match.group(2) or "True"
        canonical = next((s for s in _STATUSES if s.lower() == status.lower()), None)
        if canonical is None:
            raise ValueError(f"the condition status must be True, False or Unknown, not {status!r}")
        patterns.append((kind, canonical))
    if len(patterns) > MAX_PATTERNS:
        raise ValueError(f"at most {MAX_PATTERNS} condition patterns are allowed")
    return PodConditionRule(patterns=tuple(patterns))


def parse_rule(text: str, *, source: str) -> FailureRule:
    """One rule as a property spells it; `ValueError` says what is wrong (not where: the caller
    names the property)."""
    words = text.split()
    if len(words) < 2:
        raise ValueError(
            "a rule is '<FailApplication|Ignore|Count> onExitCodes ...' or "
            "'<FailApplication|Ignore|Count> onPodConditions ...'"
        )
    action = _ACTIONS.get(words[0].lower())
    if action is None:
        raise ValueError(
            f"the action must be FailApplication, Ignore or Count, not {words[0]!r}"
            + (" (a Job's FailJob is FailApplication here)" if words[0] == "FailJob" else "")
        )
    kind = words[1].lower()
    requirement: ExitCodeRule | PodConditionRule
    if kind == "onexitcodes":
        requirement = _exit_code_rule(words[2:])
    elif kind == "onpodconditions":
        requirement = _condition_rule(words[2:])
    else:
        raise ValueError(
            f"the requirement must be onExitCodes or onPodConditions, not {words[1]!r}"
        )
    return FailureRule(action=action, requirement=requirement, source=source)


def rule_number(name: str) -> str | None:
    """The rule of a failure rule's property name: a number, 1, 2, 3..."""
    if name.isascii() and name.isdigit() and not name.startswith("0"):
        return None
    return "must be a rule number: 1, 2, 3... (rules apply in ascending number)"


FAILURE_RULES_DOC = (
    "A failure rule, applied in ascending NAME (1, 2...); the first a failed executor matches "
    "decides: '<FailApplication|Ignore|Count> onExitCodes [container=<name>|*] In|NotIn <codes>' "
    "or '... onPodConditions <Type>[=<status>],...'. No rule matching: Count. See "
    "docs/operations.md."
)


def parse_rules(rules: Mapping[str, str]) -> tuple[FailureRule, ...]:
    """The rules of `execpods.executor.failureRules.<n>` (`{n: text}`) in the order they apply;
    `SettingsError` names a bad rule's property and says what is wrong."""
    if len(rules) > MAX_RULES:
        raise SettingsError(
            f"{FAILURE_RULES_PREFIX}*: at most {MAX_RULES} failure rules are allowed, "
            f"not {len(rules)}"
        )
    parsed = []
    for name in sorted(rules, key=int):
        key = f"{FAILURE_RULES_PREFIX}{name}"
        try:
            parsed.append(parse_rule(rules[name], source=key))
        except ValueError as error:
            raise SettingsError(f"{key}={rules[name]!r} is invalid: {error}") from None
    return tuple(parsed)


def check_rules(rules: Iterable[FailureRule], *, count_disruptions: bool) -> None:
    """A rule the implied disruption rule would always decide first is a configuration error:
    `Count`/`FailApplication onPodConditions DisruptionTarget` (alone) under
    `countDisruptions=false` could never apply, and silently doing nothing is not what its
    author meant. `SettingsError` names the rule and the switch that lets it apply."""
    if count_disruptions:
        return
    for rule in rules:
        requirement = rule.requirement
        if rule.action is FailureAction.IGNORE or not isinstance(requirement, PodConditionRule):
            continue
        if all(pattern == (DISRUPTION_TARGET, "True") for pattern in requirement.patterns):
            raise SettingsError(
                f"{rule.source}={rule.describe()!r} never applies: "
                "execpods.executor.countDisruptions=false (the default) ignores disrupted "
                "executors ahead of every rule; set execpods.executor.countDisruptions=true to "
                "let the rules decide disruptions"
            )


DISRUPTIONS_IGNORED = FailureRule(
    action=FailureAction.IGNORE,
    requirement=PodConditionRule(patterns=((DISRUPTION_TARGET, "True"),)),
    source="execpods.executor.countDisruptions=false",
)


class FailureRules:
    """The rules in force: the implied disruption rule first (unless disruptions count), then the
    configured ones; `decide` is pure, so the lifecycle manager and the crash-loop brake agree."""

    def __init__(
        self,
        rules: Iterable[FailureRule] = (),
        *,
        count_disruptions: bool = False,
        executor_container: str,
    ) -> None:
        implied = () if count_disruptions else (DISRUPTIONS_IGNORED,)
        self.rules: tuple[FailureRule, ...] = (*implied, *rules)
        self._container = executor_container

    def decide(self, pod: ExecutorPod) -> FailureDecision:
        """The first matching rule's action for a failed executor's pod; Count when none."""
        for rule in self.rules:
            if rule.matches(pod, self._container):
                return FailureDecision(action=rule.action, rule=rule)
        return FailureDecision(action=FailureAction.COUNT)
