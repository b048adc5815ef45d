"""Quota as capacity, the pure gate: the cap, the probes on a growing back-off, room as executors
go, the lifting, and the notices that name the quota and its figures."""

from __future__ import annotations

import random

from execpods.core import NoticeKind, QuotaExceeded
from execpods.core.quota import QuotaGate, QuotaSettings

P = 0


def exceeded(used: int = 6, limited: int = 6) -> QuotaExceeded:
    return QuotaExceeded(
        f'create pod failed: 403 pods "x" is forbidden: exceeded quota: compute, requested: '
        f"pods=1, used: pods={used}, limited: pods={limited}",
        quota="compute",
        requested={"pods": "1"},
        used={"pods": str(used)},
        limited={"pods": str(limited)},
    )


def gate(retry: str = "1s", maximum: str = "30s") -> QuotaGate:
    settings = QuotaSettings.from_properties(
        {"execpods.quota.retryInterval": retry, "execpods.quota.maxRetryInterval": maximum}
    )
    return QuotaGate(settings, rng=random.Random(7))


def test_uncapped_profiles_create_what_they_want() -> None:
    quota = gate()
    assert quota.allowed(P, live=0, wanted=20, now=0.0) == 20
    assert quota.effective_target(P, 10) == 10
    assert quota.cap(P) is None


def test_a_refusal_caps_the_target_at_what_the_namespace_admitted_and_names_the_quota() -> None:
    quota = gate()
    notice = quota.refused(P, exceeded(), count=4, live=6, target=10, now=100.0)
    assert notice.kind is NoticeKind.QUOTA_EXCEEDED
    assert notice.count == 4
    assert "ResourceQuota compute: requested pods=1, used pods=6, limited pods=6" in notice.message
    assert "capped at 6" in notice.message
    assert "not counted as executor failures" in notice.message
    assert 0.5 <= notice.retry_in <= 1.0  # equal jitter of the first interval
    assert quota.effective_target(P, 10) == 6
    assert quota.capped() == {P: 6}
    assert quota.kept_out({P: 10}) == 4
    assert quota.refused_creates == 4
    # nothing until the probe is due, then one create
    assert quota.allowed(P, live=6, wanted=4, now=100.0) == 0
    assert quota.allowed(P, live=6, wanted=4, now=100.0 + notice.retry_in) == 1


def test_room_left_by_executors_that_went_is_used_at_once() -> None:
    quota = gate()
    quota.refused(P, exceeded(), count=4, live=6, target=10, now=0.0)
    assert quota.allowed(P, live=4, wanted=6, now=0.1) == 2  # two went: two creates, no waiting
    assert quota.allowed(P, live=5, wanted=5, now=0.1) == 1


def test_refused_probes_back_off_doubling_up_to_the_maximum() -> None:
    quota = gate(retry="1s", maximum="8s")
    now, waits = 0.0, []
    for _ in range(7):
        notice = quota.refused(P, exceeded(), count=1, live=6, target=10, now=now)
        waits.append(notice.retry_in)
        now += notice.retry_in
        assert quota.allowed(P, live=6, wanted=4, now=now - 0.001) == 0
        assert quota.allowed(P, live=6, wanted=4, now=now) == 1
    ceilings = [1, 2, 4, 8, 8, 8, 8]
    for wait, ceiling in zip(waits, ceilings, strict=True):
        assert ceiling / 2 <= wait <= ceiling
    # so a refused namespace sees at most one create per back-off: under one a second
    assert 7 / now < 1.0


def test_admitted_probes_grow_and_the_target_lifts_the_cap() -> None:
    quota = gate()
    quota.refused(P, exceeded(), count=4, live=6, target=10, now=0.0)
    due = quota.wait_for(P, 0.0)
    assert quota.allowed(P, live=6, wanted=4, now=due) == 1
    assert quota.created(P, count=1, live=7, target=10, now=due) is None
    assert quota.effective_target(P, 10) == 7
    assert quota.allowed(P, live=7, wanted=3, now=due) == 2  # slow start: twice as many
    assert quota.created(P, count=2, live=9, target=10, now=due) is None
    assert quota.allowed(P, live=9, wanted=1, now=due) == 1
    lifted = quota.created(P, count=1, live=10, target=10, now=due)
    assert lifted is not None
    assert lifted.kind is NoticeKind.QUOTA_CAP_LIFTED
    assert "compute" in lifted.message
    assert quota.cap(P) is None
    assert quota.allowed(P, live=10, wanted=20, now=due) == 20


def test_a_target_within_the_cap_lifts_it_and_profiles_are_capped_apart() -> None:
    quota = gate()
    quota.refused(P, exceeded(), count=1, live=6, target=10, now=0.0)
    quota.refused(1, exceeded(), count=1, live=2, target=4, now=0.0)
    assert quota.target_changed(P, 8) is None  # still above what was admitted
    lifted = quota.target_changed(P, 5)
    assert lifted is not None
    assert lifted.kind is NoticeKind.QUOTA_CAP_LIFTED
    assert quota.capped() == {1: 2}


def test_a_maximum_below_the_first_interval_is_the_first_interval() -> None:
    quota = gate(retry="10s", maximum="1s")
    notice = quota.refused(P, exceeded(), count=1, live=0, target=1, now=0.0)
    assert 5.0 <= notice.retry_in <= 10.0
