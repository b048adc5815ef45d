"""A watch that keeps failing says so once a minute, not on every retry.

Against an API server that never answers, the watch logged a WARNING per back-off (five in the
first six seconds, beside the one line naming `--api-url` and health's NOT_SERVING). The first
failure of a streak is a WARNING, the next ones DEBUG until a minute has passed, then a WARNING
with the count. Real HTTP to a port nothing listens on; the waits advance a manual clock by 30 s
each, so the minute passes without waiting for it.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest
from execpods.core import ManualClock
from execpods.k8s import ApiGateway, KubernetesPodOperations, WatchSource, connect

from tests.k8s.conftest import APP_ID, FAST, RecordingStore

WAITS = 5


class MinuteWaiter:
    """A `Waiter` whose every wait moves the clock 30 s; stops the loop after `WAITS` waits."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self.waits = 0
        self.done = threading.Event()

    def wait(self, seconds: float) -> bool:
        self.waits += 1
        self._clock.advance(30.0)
        if self.waits >= WAITS:
            self.done.set()
            return True
        return False

    def wake(self) -> None:
        pass

    def stop(self) -> None:
        self.done.set()

    @property
    def stopped(self) -> bool:
        return self.done.is_set()


@pytest.fixture
def refused_url() -> Iterator[str]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


def test_a_failing_watch_warns_once_a_minute(
    store: RecordingStore, refused_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="execpods.k8s.watch")
    clock = ManualClock()
    waiter = MinuteWaiter(clock)
    client = connect(api_url=refused_url)
    operations = KubernetesPodOperations(ApiGateway(client, namespace="default", request_timeout=5))
    source = WatchSource(store, operations, settings=FAST, clock=clock, waiter=waiter)
    try:
        source.start(APP_ID)
        assert waiter.done.wait(60)
    finally:
        source.stop()
        client.close()
    failures = [r for r in caplog.records if r.getMessage().startswith("Watch failed")]
    assert len(failures) == WAITS
    levels = [r.levelno for r in failures]
    # at 0 s, 30 s (DEBUG), 60 s (a minute later), 90 s (DEBUG), 120 s.
    assert levels == [
        logging.WARNING,
        logging.DEBUG,
        logging.WARNING,
        logging.DEBUG,
        logging.WARNING,
    ]
    assert "(failing for 3 attempts)" in failures[2].getMessage()
    assert "Connection refused" in failures[0].getMessage()
