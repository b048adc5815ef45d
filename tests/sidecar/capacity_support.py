"""What the capacity end-to-end tests share: a stream read in the background, its notices by
kind, and a sidecar stopped while its simulator still serves."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import grpc
from execpods.client import StreamUpdate
from execpods.kubesim import KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.sidecar.conftest import SidecarOnFactory


def collect(stream: Iterator[StreamUpdate], into: list[StreamUpdate]) -> threading.Thread:
    """Read `stream` into `into` on a daemon thread until the client closes it."""

    def run() -> None:
        try:
            for update in stream:
                into.append(update)
        except grpc.RpcError:
            pass  # the stream ends when the client closes

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def notices(updates: list[StreamUpdate], kind: str) -> list[str]:
    """The messages of every notice of `kind` the updates carried, in order."""
    return [n.message for u in list(updates) for n in u.notices if n.kind == kind]


@contextlib.contextmanager
def sidecar_on(
    sim: KubeSim, make_sidecar_on: SidecarOnFactory, app_id: str, conf: dict[str, str]
) -> Iterator[EmbeddedSidecar]:
    """A sidecar stopped while its simulator still serves (its stop deletes the pods)."""
    sidecar = make_sidecar_on(sim, app_id, conf=conf)
    try:
        yield sidecar
    finally:
        sidecar.stop()
