"""Failure rules (a Job's podFailurePolicy for executors): each action, each match kind, the order,
the defaults, and configuration errors that name the property and the rule."""

from __future__ import annotations

import pytest
from execpods.core import (
    EXECUTOR_CONTAINER_NAME,
    AllocatorNotice,
    ContainerStatus,
    ContainerTerminated,
    ContainerWaiting,
    CoreSettings,
    ExecutorPod,
    ExecutorRemoval,
    NoticeKind,
    PodCondition,
    SettingsError,
)
from execpods.core.failurerules import (
    FailureAction,
    FailureRules,
    parse_rule,
    parse_rules,
)
from execpods.core.testing import Composed, compose_deterministic, failed_executor

FAIL = FailureAction.FAIL_APPLICATION
IGNORE = FailureAction.IGNORE
COUNT = FailureAction.COUNT


def _exited(name: str, code: int) -> ContainerStatus:
    return ContainerStatus(name=name, state=ContainerTerminated(exit_code=code))


def failed_pod(
    executor_code: int | None = 1,
    *,
    sidecar_code: int | None = None,
    init_code: int | None = None,
    conditions: tuple[PodCondition, ...] = (),
    reason: str | None = None,
) -> ExecutorPod:
    statuses = []
    if executor_code is not None:
        statuses.append(_exited(EXECUTOR_CONTAINER_NAME, executor_code))
    else:
        statuses.append(
            ContainerStatus(
                name=EXECUTOR_CONTAINER_NAME, state=ContainerWaiting(reason="PodInitializing")
            )
        )
    if sidecar_code is not None:
        statuses.append(_exited("log-shipper", sidecar_code))
    inits = () if init_code is None else (_exited("fetch-deps", init_code),)
    return ExecutorPod(
        name="exec-1",
        phase="Failed",
        reason=reason,
        container_statuses=tuple(statuses),
        init_container_statuses=inits,
        conditions=conditions,
    )


DISRUPTED = (PodCondition(type="DisruptionTarget", status="True", reason="PreemptionByScheduler"),)
CONFIG_ISSUE = (PodCondition(type="ConfigIssue", status="True"),)

# (rules, pod, expected action, index of the deciding rule among the configured ones or None)
CASES = [
    # onExitCodes, executor container (the default), In
    (["FailApplication onExitCodes In 126,127"], failed_pod(127), FAIL, 0),
    (["FailApplication onExitCodes In 126,127"], failed_pod(1), COUNT, None),
    # NotIn
    (["Ignore onExitCodes NotIn 1,52"], failed_pod(143), IGNORE, 0),
    (["Ignore onExitCodes NotIn 1,52"], failed_pod(52), COUNT, None),
    # exit 0 never matches, even NotIn (a Job excludes succeeded containers)
    (
        ["FailApplication onExitCodes container=* NotIn 1"],
        failed_pod(None, init_code=0),
        COUNT,
        None,
    ),
    # the executor container only, by default: a sidecar's code does not speak for it
    (["FailApplication onExitCodes In 3"], failed_pod(1, sidecar_code=3), COUNT, None),
    # any container: a sidecar's and an init container's codes count
    (["FailApplication onExitCodes container=* In 3"], failed_pod(1, sidecar_code=3), FAIL, 0),
    (["Count onExitCodes container=* In 2"], failed_pod(None, init_code=2), COUNT, 0),
    (["Ignore onExitCodes container=* In 2"], failed_pod(None, init_code=2), IGNORE, 0),
    # a named container
    (["Ignore onExitCodes container=log-shipper In 3"], failed_pod(1, sidecar_code=3), IGNORE, 0),
    (["Ignore onExitCodes container=fetch-deps In 2"], failed_pod(1, init_code=2), IGNORE, 0),
    (["Ignore onExitCodes container=other In 3"], failed_pod(1, sidecar_code=3), COUNT, None),
    # onPodConditions: type (status True by default), type=status
    (["Ignore onPodConditions ConfigIssue"], failed_pod(1, conditions=CONFIG_ISSUE), IGNORE, 0),
    (
        ["Ignore onPodConditions ConfigIssue=False"],
        failed_pod(1, conditions=CONFIG_ISSUE),
        COUNT,
        None,
    ),
    (
        ["FailApplication onPodConditions Other,ConfigIssue"],
        failed_pod(1, conditions=CONFIG_ISSUE),
        FAIL,
        0,
    ),
    # the first match decides
    (
        ["Count onExitCodes In 127", "FailApplication onExitCodes In 126,127"],
        failed_pod(127),
        COUNT,
        0,
    ),
    (
        ["Ignore onExitCodes In 3", "FailApplication onExitCodes In 126,127"],
        failed_pod(127),
        FAIL,
        1,
    ),
    # keywords are case-insensitive, statuses canonical
    (["ignore ONEXITCODES notin 1"], failed_pod(2), IGNORE, 0),
    (
        ["Ignore onPodConditions configissue=true"],
        failed_pod(1, conditions=CONFIG_ISSUE),
        COUNT,
        None,
    ),
]


@pytest.mark.parametrize(("texts", "pod", "action", "deciding"), CASES)
def test_each_action_and_match_kind(
    texts: list[str], pod: ExecutorPod, action: FailureAction, deciding: int | None
) -> None:
    configured = [parse_rule(t, source=f"rule {i}") for i, t in enumerate(texts)]
    rules = FailureRules(
        configured, count_disruptions=True, executor_container=EXECUTOR_CONTAINER_NAME
    )
    decision = rules.decide(pod)
    assert decision.action is action
    assert decision.rule is (None if deciding is None else configured[deciding])
    assert decision.counted is (action is not IGNORE)


# The defaults reproduce the behaviour before rules: disruptions are not counted (unless
# countDisruptions), every other failure is.
DEFAULT_CASES = [
    (failed_pod(1), False, COUNT),
    (failed_pod(137), False, COUNT),
    (failed_pod(143, conditions=DISRUPTED), False, IGNORE),
    (failed_pod(143, reason="Evicted"), False, IGNORE),  # a kubelet eviction, no condition
    (failed_pod(143, conditions=DISRUPTED), True, COUNT),
    (failed_pod(143, reason="Evicted"), True, COUNT),
    (
        failed_pod(1, conditions=(PodCondition(type="DisruptionTarget", status="False"),)),
        False,
        COUNT,
    ),
]


@pytest.mark.parametrize(("pod", "count_disruptions", "action"), DEFAULT_CASES)
def test_the_defaults_reproduce_count_disruptions(
    pod: ExecutorPod, count_disruptions: bool, action: FailureAction
) -> None:
    rules = FailureRules(
        parse_rules(CoreSettings().failure_rules),
        count_disruptions=count_disruptions,
        executor_container=EXECUTOR_CONTAINER_NAME,
    )
    assert rules.decide(pod).action is action


def test_the_disruption_rule_comes_before_the_configured_ones() -> None:
    settings = CoreSettings.from_properties(
        {"execpods.executor.failureRules.1": "FailApplication onExitCodes In 143"}
    )
    rules = FailureRules(
        parse_rules(settings.failure_rules),
        count_disruptions=False,
        executor_container=EXECUTOR_CONTAINER_NAME,
    )
    decision = rules.decide(failed_pod(143, conditions=DISRUPTED))
    assert decision.action is IGNORE
    assert decision.explain().startswith("execpods.executor.countDisruptions=false")
    assert rules.decide(failed_pod(143)).action is FAIL


@pytest.mark.parametrize("action", ["Count", "FailApplication"])
def test_a_rule_on_disruptions_that_the_default_would_hide_fails_start_up(action: str) -> None:
    """`countDisruptions=false` ignores disruptions ahead of every rule, so a rule that counts
    or fails on DisruptionTarget alone could never apply: the start says so and how to fix it,
    instead of the rule doing nothing."""
    key = "execpods.executor.failureRules.1"
    text = f"{action} onPodConditions DisruptionTarget"
    with pytest.raises(SettingsError) as raised:
        CoreSettings.from_properties({key: text})
    message = str(raised.value)
    assert message.startswith(f"{key}={text!r} never applies: ")
    assert "execpods.executor.countDisruptions=true" in message
    # With disruptions left to the rules, the rule decides them; another condition beside it,
    # or an Ignore that agrees with the default, is fine either way.
    counting = {key: text, "execpods.executor.countDisruptions": "true"}
    counted = CoreSettings.from_properties(counting)
    rules = FailureRules(
        parse_rules(counted.failure_rules),
        count_disruptions=counted.count_disruptions,
        executor_container=EXECUTOR_CONTAINER_NAME,
    )
    assert rules.decide(failed_pod(143, conditions=DISRUPTED)).action is FailureAction(action)
    CoreSettings.from_properties({key: f"{action} onPodConditions DisruptionTarget,ConfigIssue"})
    CoreSettings.from_properties({key: "Ignore onPodConditions DisruptionTarget"})
    CoreSettings.from_properties({key: f"{action} onPodConditions DisruptionTarget=False"})


def test_rules_apply_in_ascending_number_not_in_text_order() -> None:
    settings = CoreSettings.from_properties(
        {
            "execpods.executor.failureRules.10": "FailApplication onExitCodes In 1",
            "execpods.executor.failureRules.2": "Ignore onExitCodes In 1",
        }
    )
    parsed = parse_rules(settings.failure_rules)
    assert [r.source for r in parsed] == [
        "execpods.executor.failureRules.2",
        "execpods.executor.failureRules.10",
    ]
    rules = FailureRules(parsed, count_disruptions=True, executor_container=EXECUTOR_CONTAINER_NAME)
    assert rules.decide(failed_pod(1)).action is IGNORE


def test_the_executor_container_is_the_configured_one() -> None:
    rule = parse_rule("FailApplication onExitCodes In 3", source="r")
    rules = FailureRules([rule], count_disruptions=True, executor_container="log-shipper")
    assert rules.decide(failed_pod(1, sidecar_code=3)).action is FAIL


BAD = [
    ("1", "FailJob onExitCodes In 1", "FailJob is FailApplication here"),
    ("1", "Explode onExitCodes In 1", "must be FailApplication, Ignore or Count, not 'Explode'"),
    ("2", "Ignore", "a rule is"),
    ("3", "Ignore onLabels x", "must be onExitCodes or onPodConditions, not 'onLabels'"),
    ("4", "Ignore onExitCodes Equals 1", "the operator must be In or NotIn, not 'Equals'"),
    ("5", "Ignore onExitCodes In 0,1", "exit code 0 cannot be used with In"),
    ("6", "Ignore onExitCodes In 1,1", "must not repeat"),
    ("7", "Ignore onExitCodes In one", "'one' is not an exit code"),
    ("8", "Ignore onExitCodes In 1, 2", "comma-separated list without spaces"),
    ("9", "Ignore onExitCodes container= In 1", "container= needs a container name"),
    ("10", "Ignore onExitCodes In 4294967296", "not a 32-bit integer"),
    ("11", "Ignore onPodConditions Ready=Maybe", "must be True, False or Unknown, not 'Maybe'"),
    ("12", "Ignore onPodConditions", "onPodConditions takes"),
    ("13", "Ignore onExitCodes In " + ",".join(str(i) for i in range(1, 300)), "at most 255"),
]


@pytest.mark.parametrize(("number", "text", "problem"), BAD)
def test_a_bad_rule_names_its_property_and_the_rule(number: str, text: str, problem: str) -> None:
    key = f"execpods.executor.failureRules.{number}"
    with pytest.raises(SettingsError) as raised:
        CoreSettings.from_properties({key: text})
    message = str(raised.value)
    assert message.startswith(f"{key}={text!r} is invalid: ")
    assert problem in message


def test_rule_names_must_be_numbers_and_at_most_twenty_rules() -> None:
    with pytest.raises(
        SettingsError, match=r"failureRules\.first is invalid: 'first' must be a rule number"
    ):
        CoreSettings.from_properties(
            {"execpods.executor.failureRules.first": "Count onExitCodes In 1"}
        )
    with pytest.raises(SettingsError, match="must be a rule number"):
        CoreSettings.from_properties(
            {"execpods.executor.failureRules.01": "Count onExitCodes In 1"}
        )
    many = {f"execpods.executor.failureRules.{i}": "Count onExitCodes In 1" for i in range(1, 22)}
    with pytest.raises(SettingsError, match="at most 20 failure rules"):
        CoreSettings.from_properties(many)


def test_a_rule_reads_back_as_written() -> None:
    for text in (
        "FailApplication onExitCodes In 126,127",
        "Ignore onExitCodes container=* NotIn 0,1",
        "Count onPodConditions DisruptionTarget,Ready=False",
    ):
        assert parse_rule(text, source="r").describe() == text


# Through the lifecycle manager: what each action does to the failure budget, the removal and
# the application, on a composed backend.


def _lifecycle(properties: dict[str, str]) -> tuple[Composed, list[AllocatorNotice]]:
    composed = compose_deterministic(
        settings=CoreSettings.from_properties({"spark.executor.maxNumFailures": "5", **properties})
    )
    told: list[AllocatorNotice] = []
    composed.backend.add_notice_listener(told.append)
    composed.backend.start(initial_executors=0)
    return composed, told


def _fail(composed: Composed, *pods: ExecutorPod) -> None:
    for pod in pods:
        composed.store.update_pod(pod)
    composed.store.notify_subscribers()


def test_fail_application_fails_it_at_once_naming_the_rule_and_the_executor() -> None:
    composed, told = _lifecycle(
        {"execpods.executor.failureRules.1": "FailApplication onExitCodes In 126,127"}
    )
    failures: list[str] = []
    composed.backend.open_stream(
        1.0,
        on_snapshots=lambda _: None,
        on_removal=lambda _: None,
        on_application_failure=failures.append,
    )
    _fail(composed, failed_executor(1, exit_code=1))
    assert failures == []
    _fail(composed, failed_executor(2, exit_code=127))
    (failure,) = failures
    assert failure.startswith("Executor 2 failed (exit code 127) and failure rule ")
    assert "execpods.executor.failureRules.1 (FailApplication onExitCodes In 126,127)" in failure
    assert [n.kind for n in told] == [NoticeKind.FAILURE_RULE]
    assert composed.backend.failed_executors == 1  # only executor 1 was counted


def test_ignore_spends_nothing_and_is_reported_as_not_caused_by_the_app() -> None:
    composed, told = _lifecycle({"execpods.executor.failureRules.1": "Ignore onExitCodes In 2"})
    removed: list[ExecutorRemoval] = []
    composed.backend.open_stream(
        1.0, on_snapshots=lambda _: None, on_removal=lambda r: removed.append(r.removal)
    )
    _fail(composed, failed_executor(1, exit_code=2), failed_executor(2, exit_code=3))
    # executor 1's container exited 2: ignored; executor 2's exited 3 (its sidecar's 2 does not
    # speak for it): counted
    assert composed.backend.failed_executors == 1
    by_id = {r.executor_id: r.reason for r in removed}
    assert not by_id[1].exit_caused_by_app
    assert "Failure rule execpods.executor.failureRules.1" in by_id[1].message
    assert by_id[2].exit_caused_by_app
    assert "Failure rule" not in by_id[2].message
    assert [n.kind for n in told] == [NoticeKind.FAILURE_RULE]
    assert "is not counted toward spark.executor.maxNumFailures" in told[0].message


def test_without_rules_every_failure_counts_as_before() -> None:
    composed, told = _lifecycle({})
    _fail(composed, failed_executor(1, exit_code=127), failed_executor(2, exit_code=1))
    assert composed.backend.failed_executors == 2
    assert told == []
