"""The parent's side of `session_driver.py`: one JVM that runs real Spark applications in turn."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["SessionError", "SparkSessions"]

DRIVER = Path(__file__).with_name("session_driver.py")


class SessionError(RuntimeError):
    """A command the driver answered with an error (its message and the JVM's stderr tail)."""


class SparkSessions:
    """Real Spark drivers in one JVM, one application at a time, steered command by command.

    Every command waits for its answer; Spark's own threads go on meanwhile (its allocator, its
    watch, its lifecycle manager). ``class_path`` is put on the driver's class path at the JVM's
    start (the plugin jar and the test kit).
    """

    def __init__(self, class_path: list[Path]) -> None:
        argv = [sys.executable, str(DRIVER), "--class-path", os.pathsep.join(map(str, class_path))]
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._calls = threading.Lock()
        """One command at a time: the harness's script and the executor stand-ins share it."""
        self.stderr_tail: list[str] = []
        threading.Thread(target=self._read, name="spark-sessions-out", daemon=True).start()
        threading.Thread(target=self._drain, name="spark-sessions-err", daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("{"):
                self._answers.put(json.loads(line))
        self._answers.put({"event": "exited"})

    def _drain(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self.stderr_tail = [*self.stderr_tail[-1999:], line.rstrip()]

    def call(self, op: str, timeout: float = 120.0, **fields: Any) -> dict[str, Any]:
        """Send one command and return its answer; a refusal raises `SessionError`."""
        with self._calls:
            return self._call(op, timeout, fields)

    def _call(self, op: str, timeout: float, fields: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise SessionError(f"{op}: the driver has exited\n{self.tail()}") from None
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{op}: no answer from the Spark driver in {timeout} s") from None
        if answer.get("event") != op:
            raise SessionError(f"{op}: {answer.get('message', answer)}\n{self.tail()}")
        return answer

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.stderr_tail[-lines:])

    def start(self, conf: dict[str, str], timeout: float = 180.0) -> str:
        """A new Spark application with ``conf``; returns its application id."""
        return str(self.call("start", timeout, conf=conf)["appId"])

    def close(self, timeout: float = 60.0) -> int:
        """Stop the current application, end the JVM, and return the process's exit code."""
        proc = self._proc
        try:
            if proc.poll() is None and proc.stdin is not None:
                proc.stdin.close()
            return proc.wait(timeout)
        except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
            proc.kill()
            return proc.wait(10)

    def __enter__(self) -> SparkSessions:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
