"""The client's reconnection bookkeeping, deterministically: back-off and the re-sent view."""

from __future__ import annotations

import grpc
import pytest
from execpods.client import Reconnect
from execpods.client.reconnect import Backoff, DriverViewMemory


class _Error(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


UNAVAILABLE = _Error(grpc.StatusCode.UNAVAILABLE)


def test_backoff_doubles_to_its_ceiling_with_jitter_and_gives_up() -> None:
    now = [0.0]
    policy = Reconnect(initial_backoff=0.1, max_backoff=1.0, give_up_after=10.0)
    backoff = Backoff(policy, clock=lambda: now[0], jitter=lambda: 1.0)
    delays = []
    while (delay := backoff.next_delay(UNAVAILABLE)) is not None:
        delays.append(delay)
        now[0] += delay
    assert delays[:5] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert max(delays) == 1.0
    assert 10.0 <= now[0] < 11.0
    backoff.reset()
    assert backoff.next_delay(UNAVAILABLE) == pytest.approx(0.1)


def test_jitter_takes_between_half_and_all_of_the_step() -> None:
    low = Backoff(Reconnect(), jitter=lambda: 0.0).next_delay(UNAVAILABLE)
    high = Backoff(Reconnect(), jitter=lambda: 1.0).next_delay(UNAVAILABLE)
    assert low == pytest.approx(0.05)
    assert high == pytest.approx(0.1)


def test_only_the_policys_codes_are_retried() -> None:
    backoff = Backoff(Reconnect())
    assert backoff.next_delay(_Error(grpc.StatusCode.INVALID_ARGUMENT)) is None
    assert backoff.next_delay(_Error(grpc.StatusCode.INTERNAL)) is None


def test_the_view_to_resend_accumulates_and_forgets_removed_executors() -> None:
    memory = DriverViewMemory()
    assert memory.request() is None  # the driver never sent one: nothing to re-send
    memory.note_update([1, 2, 3], [], explicit=False)
    memory.note_update([4], [2], explicit=True)
    memory.note_update([], [], explicit=False)  # explicit stays: the sidecar's is sticky too
    memory.note_removed([3])
    request = memory.request()
    assert request is not None
    assert (list(request.registered), list(request.released), request.explicit) == (
        [1, 2, 4],
        [2],
        True,
    )
