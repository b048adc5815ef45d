"""The registration timeout a driver sets is sent, and sent again after a reconnect."""

from __future__ import annotations

from execpods.client.convert import update_request
from execpods.client.reconnect import DriverViewMemory


def test_the_timeout_is_sent_only_when_given() -> None:
    assert not update_request([], [], explicit=True).HasField("registration_timeout_ms")
    request = update_request([1], [], explicit=True, registration_timeout_ms=0)
    assert request.HasField("registration_timeout_ms")
    assert request.registration_timeout_ms == 0


def test_a_reconnect_replays_the_last_timeout() -> None:
    memory = DriverViewMemory()
    memory.note_update([1], [], explicit=True, registration_timeout_ms=30_000)
    memory.note_update([2], [], explicit=True)  # an update without one keeps it
    replay = memory.request()
    assert replay is not None
    assert replay.registration_timeout_ms == 30_000
    assert list(replay.registered) == [1, 2]
