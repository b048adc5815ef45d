"""A driver's request is judged whole, once, in core, and a refused one changes nothing.

Every rule of `TotalsRequest` (docs/core.md) has one wording; each refused request leaves the
declared profiles and every target exactly as they were, and queues nothing. The issue's case:
with `execpods.allocation.maxTotal=10`, a request for 11 that declares profile 7 must not declare
it.
"""

from __future__ import annotations

import re

import pytest
from execpods.core import (
    CoreSettings,
    DeterministicScheduler,
    ManualClock,
    ResourceProfile,
    TotalsRequest,
)
from execpods.core.testing import compose_deterministic
from hypothesis import given
from hypothesis import strategies as st

GPU = ResourceProfile(id=1, cores=4, extra_resources={"nvidia.com/gpu": "1"})
SEVEN = ResourceProfile(id=7, cores=2)


class Rig:
    def __init__(self) -> None:
        clock = ManualClock()
        self.requests = DeterministicScheduler(clock)
        self.backend = compose_deterministic(
            settings=CoreSettings.from_properties(
                {"execpods.allocation.maxTotal": "10", "spark.executor.instances": "2"}
            ),
            clock=clock,
            request_scheduler=self.requests,
        ).backend
        self.backend.start()
        self.backend.request(TotalsRequest(totals={0: 3, 1: 4}, profiles=(GPU,)))
        self.requests.run_until_idle()


RULES = [
    pytest.param(
        TotalsRequest(totals={0: 11}, profiles=(SEVEN,)),
        "resource profile 0: total=11 is invalid: it is above execpods.allocation.maxTotal=10",
        id="above-max-total-declares-nothing",
    ),
    pytest.param(
        TotalsRequest(totals={0: 1, 7: -1}, profiles=(SEVEN,)),
        "resource profile 7: total=-1 is invalid: it must not be negative",
        id="negative",
    ),
    pytest.param(
        TotalsRequest(totals={0: 1, 9: 1}, profiles=(SEVEN,)),
        "resource profile 9 was never declared: declare it (in the same request or an earlier "
        "one) before asking for executors of it",
        id="undeclared",
    ),
    pytest.param(
        TotalsRequest(totals={0: 1}, profiles=(SEVEN, ResourceProfile(id=7, cores=3))),
        "resource profile 7 is declared twice in one request",
        id="declared-twice",
    ),
    pytest.param(
        TotalsRequest(totals={1: 2}, profiles=(SEVEN, ResourceProfile(id=1, cores=8))),
        "resource profile 1 is already declared with another shape (profiles are immutable once "
        "declared)",
        id="reshaped",
    ),
]


@pytest.mark.parametrize(("request_", "wording"), RULES)
def test_each_refused_request_changes_nothing_and_says_why_in_one_wording(
    request_: TotalsRequest, wording: str
) -> None:
    rig = Rig()
    backend = rig.backend
    before = (backend.declared_profile_ids(), backend.targets())
    with pytest.raises(ValueError, match=re.escape(wording)) as refused:
        backend.request(request_)
    assert str(refused.value) == wording
    rig.requests.run_until_idle()
    assert (backend.declared_profile_ids(), backend.targets()) == before
    assert before == ([0, 1], {0: 3, 1: 4})


def test_a_good_request_declares_and_sets_together_and_may_repeat_a_declaration() -> None:
    rig = Rig()
    backend = rig.backend
    backend.request(TotalsRequest(totals={0: 10, 7: 5}, profiles=(SEVEN, GPU)))
    rig.requests.run_until_idle()
    assert backend.declared_profile_ids() == [0, 1, 7]
    assert backend.targets() == {0: 10, 1: 4, 7: 5}


@given(
    totals=st.dictionaries(st.integers(0, 9), st.integers(-3, 14), max_size=4),
    declare=st.lists(st.sampled_from([SEVEN, GPU, ResourceProfile(id=1, cores=1)]), max_size=3),
)
def test_any_request_is_applied_whole_or_not_at_all(
    totals: dict[int, int], declare: list[ResourceProfile]
) -> None:
    rig = Rig()
    backend = rig.backend
    before = (backend.declared_profile_ids(), backend.targets())
    request = TotalsRequest(totals=totals, profiles=tuple(declare))
    try:
        backend.request(request)
    except ValueError:
        rig.requests.run_until_idle()
        assert (backend.declared_profile_ids(), backend.targets()) == before
        return
    rig.requests.run_until_idle()
    assert set(backend.declared_profile_ids()) == set(before[0]) | {p.id for p in declare}
    assert backend.targets() == {**before[1], **totals}
