"""The driver's failure limit replaces the sidecar's (RequestTotal.failure_limit, by the plugin)."""

from __future__ import annotations

import pytest
from execpods.core import ManualClock
from execpods.core.failures import ExecutorFailureTracker


def _failure(tracker: ExecutorFailureTracker) -> str | None:
    return tracker.application_failure


def test_the_drivers_limit_and_window_replace_the_settings_and_keep_the_count() -> None:
    clock = ManualClock()
    tracker = ExecutorFailureTracker(max_failures=3, validity_interval=None, clock=clock)
    tracker.register_failures(3)
    assert tracker.failed_executors == 3
    assert _failure(tracker) is None  # 3 is not more than 3
    tracker.set_limit(max_failures=2, validity_interval=10.0)
    assert (tracker.max_failures, tracker.validity_interval) == (2, 10.0)
    clock.advance(11.0)  # the new window forgets the three
    tracker.register_failures(2)
    assert tracker.failed_executors == 2
    tracker.register_failure()
    reason = _failure(tracker)
    assert reason is not None
    assert "(2) reached" in reason
    assert "failuresValidityInterval (10s)" in reason


def test_a_negative_limit_or_window_is_refused_and_changes_nothing() -> None:
    tracker = ExecutorFailureTracker(max_failures=3, validity_interval=None, clock=ManualClock())
    with pytest.raises(ValueError, match="max_failures"):
        tracker.set_limit(max_failures=-1, validity_interval=None)
    with pytest.raises(ValueError, match="validity_interval"):
        tracker.set_limit(max_failures=1, validity_interval=0.0)
    assert (tracker.max_failures, tracker.validity_interval) == (3, None)
