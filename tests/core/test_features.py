"""The feature shape itself: how `FeatureSet` calls the hooks, and how the creates use them.

The features that ship are tested in their own files through the composition root; here a
feature written for the test plugs into the parts that call the hooks (`FeatureSet`, the
`PodCreator`), to pin what a new feature may rely on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from execpods.core import (
    CoreSettings,
    ManualClock,
    PodAdmissionRejected,
    PodDecisions,
    PodOperationError,
)
from execpods.core.allocation import ProfileState
from execpods.core.creator import PodCreator
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.features import Feature, FeatureSet, NewExecutor, RoundFacts
from execpods.core.ids import ExecutorIds
from execpods.core.notices import NoticeHub
from execpods.core.ports import NO_DECISIONS
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.testing import TEST_APP_ID, InMemoryPodOperations, SimpleExecutorPodBuilder

STATE = ProfileState(profile_id=0, target=10, running=0)


class Capping(Feature):
    """Allows at most `most` creates, and records what each hook heard."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.asked: list[tuple[ProfileState, int]] = []
        self.refusals: list[tuple[int, str]] = []
        self.take_refusals = False

    def cap(self, state: ProfileState, wanted: int) -> int:
        self.asked.append((state, wanted))
        return min(wanted, self.most)

    def refused(self, executor: NewExecutor, error: PodOperationError) -> bool:
        self.refusals.append((executor.executor_id, type(error).__name__))
        return self.take_refusals


class Broken(Feature):
    def observe(self, facts: RoundFacts) -> None:
        raise RuntimeError("a bug")

    def cap(self, state: ProfileState, wanted: int) -> int:
        raise RuntimeError("a bug")


class Shaping(Feature):
    def __init__(self, decisions: PodDecisions) -> None:
        self.decisions = decisions

    def shape(self, executor: NewExecutor) -> PodDecisions:
        return self.decisions


def test_caps_chain_in_order_each_on_what_the_one_before_allowed() -> None:
    first, second = Capping(5), Capping(3)
    assert FeatureSet((first, None, second)).cap(STATE, 8) == 3
    assert first.asked == [(STATE, 8)]
    assert second.asked == [(STATE, 5)], "the second is asked for what the first allowed"
    assert FeatureSet((Capping(0), second)).cap(STATE, 8) == 0
    assert len(second.asked) == 1, "nothing left: the later ones are not asked"


def test_a_failing_hook_is_logged_a_failing_cap_holds_the_profile_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    after = Capping(4)
    features = FeatureSet((Broken(), after))
    with caplog.at_level(logging.ERROR, logger="execpods.core.features"):
        features.observe(RoundFacts(app_id=TEST_APP_ID, snapshot=ExecutorPodsSnapshot()))
        assert features.cap(STATE, 8) == 0
    assert "Feature Broken failed in observe" in caplog.text
    assert "Feature Broken failed to cap resource profile 0" in caplog.text


def test_decisions_join_across_features() -> None:
    features = FeatureSet(
        (
            Shaping(PodDecisions(avoid_nodes=frozenset({"a"}), claims={"x": "y"})),
            Shaping(PodDecisions(cores=1, avoid_nodes=frozenset({"b"}))),
            Shaping(NO_DECISIONS),
        )
    )
    joined = features.shape(NewExecutor(app_id="a", executor_id=1, resource_profile_id=0))
    assert joined == PodDecisions(cores=1, avoid_nodes=frozenset({"a", "b"}), claims={"x": "y"})


@dataclass
class Creates:
    creator: PodCreator
    pods: InMemoryPodOperations
    kinds: list[str]
    """The kinds of the notices told."""
    failures: ExecutorFailureTracker

    def create(self, count: int) -> None:
        ids = ExecutorIds(maximum=1000, clock=ManualClock())
        self.creator.create(app_id=TEST_APP_ID, profile_id=0, count=count, ids=ids)


def _creates(features: FeatureSet) -> Creates:
    pods = InMemoryPodOperations()
    clock = ManualClock()
    notices = NoticeHub()
    tracker = ExecutorFailureTracker.from_settings(CoreSettings(), clock)
    creator = PodCreator(
        settings=CoreSettings(adaptive_batches=False),
        pod_builder=SimpleExecutorPodBuilder(),
        pod_operations=pods,
        clock=clock,
        notices=notices,
        features=features,
        failure_tracker=tracker,
    )
    kinds: list[str] = []
    notices.add_listener(lambda n: kinds.append(n.kind.value))
    return Creates(creator, pods, kinds, tracker)


def test_a_refusal_a_feature_takes_as_capacity_is_no_failure_and_no_back_off() -> None:
    quota = Capping(10)
    quota.take_refusals = True
    creates = _creates(FeatureSet((quota,)))
    creates.pods.fail_next_create(PodAdmissionRejected("exceeded quota: pods"))
    creates.create(1)
    assert quota.refusals == [(1, "PodAdmissionRejected")]
    assert creates.failures.failed_executors == 0
    assert creates.kinds == [], "the feature tells the driver, not the creates"
    assert not creates.creator.held(0), "not backed off: the feature's cap decides"


def test_a_refusal_no_feature_takes_is_a_failure_as_before() -> None:
    heard = Capping(10)
    creates = _creates(FeatureSet((heard,)))
    creates.pods.fail_next_create(PodAdmissionRejected("exceeded quota: pods"))
    creates.create(1)
    assert heard.refusals == [(1, "PodAdmissionRejected")], "every feature hears it"
    assert creates.failures.failed_executors == 1
    assert creates.kinds == ["create_refused"]
    assert creates.creator.held(0), "backed off"
