"""`execpods-sidecar serve` as a real subprocess against the simulator, for the tests of signals.

One place starts the process, reads back the address it printed (it binds port 0) and makes sure
no process outlives a failed test: the restart, shutdown, defect and logging tests each used to
carry their own copy of this.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from execpods.kubesim import KubeSim

SIDECAR = Path(sys.executable).parent / "execpods-sidecar"


def announced(line: str) -> str:
    """A line the sidecar printed on stdout: plain text, or in JSON mode a record's message."""
    line = line.strip()
    return str(json.loads(line)["message"]) if line.startswith("{") else line


@contextmanager
def serve(
    sim: KubeSim,
    app_id: str,
    *args: str,
    options: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    stderr: int | IO[str] | None = None,
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run `execpods-sidecar [options] serve` for `app_id` and yield it with its gRPC address.

    `args` follow the serve command's own (app id, API URL, listen address); `env` is added to
    this process's environment. A process still running when the block ends is killed.
    """
    command = [
        str(SIDECAR),
        *options,
        "serve",
        "--app-id",
        app_id,
        "--api-url",
        sim.url,
        "--listen",
        "127.0.0.1:0",
        *args,
    ]
    environment = None if env is None else {**os.environ, **env}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=environment
    ) as process:
        try:
            assert process.stdout is not None
            line = announced(process.stdout.readline())
            assert line.startswith("execpods-sidecar: listening on 127.0.0.1:"), line
            yield process, line.rsplit(" ", 1)[1]
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(30)
