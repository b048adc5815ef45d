"""The sidecar's in-place resize of executors' memory, every `resizeInterval` (core's `resize`).

Spark's `ExecutorResizeDriverPlugin` runs on a scheduled thread of the driver; here a daemon
thread runs `ExecutorResizer.run_once` at the same interval once the backend has started, and
stops with it. Off unless `execpods.executor.resize.enabled` (and the interval is not 0).
"""

from __future__ import annotations

import logging
import threading

from execpods.core import ExecutorResizer

logger = logging.getLogger(__name__)


class PeriodicResizer:
    """Runs a resize round every interval on a thread of its own."""

    def __init__(self, resizer: ExecutorResizer) -> None:
        self.resizer = resizer
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        interval = self.resizer.settings.interval
        logger.info(
            "Resizing executors' memory in place every %gs (threshold %g, factor %g).",
            interval,
            self.resizer.settings.threshold,
            self.resizer.settings.factor,
        )
        self._thread = threading.Thread(target=self._run, name="execpods-resize", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.resizer.settings.interval):
            try:
                self.resizer.run_once()
            except Exception:
                logger.exception("Error in the memory check thread")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
