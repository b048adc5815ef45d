"""A sidecar server on its own event-loop thread, for the demo, the benchmarks and tests.

`serve` (the CLI) runs the server on the main thread's loop; a program that has its own main
thread (the demo's sample driver, a test) starts an `EmbeddedSidecar` instead and talks to it over
a real gRPC channel like any other client.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping
from types import TracebackType

from execpods.core import Clock
from execpods.sidecar.config.settings import Settings
from execpods.sidecar.server import SidecarServer
from execpods.sidecar.wiring import Runtime, connect

RuntimeFactory = Callable[[Settings], Runtime]


class EmbeddedSidecar:
    """`with EmbeddedSidecar(settings) as sidecar:` serves on `sidecar.address` until the end."""

    def __init__(
        self,
        settings: Settings | Mapping[str, str],
        *,
        clock: Clock | None = None,
        runtime_factory: RuntimeFactory | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.settings = (
            settings if isinstance(settings, Settings) else Settings.from_properties(settings)
        )
        self._factory: RuntimeFactory = (
            runtime_factory if runtime_factory is not None else lambda s: connect(s, clock=clock)
        )
        self._start_timeout = start_timeout
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._server: SidecarServer | None = None
        self.address = ""

    @property
    def server(self) -> SidecarServer:
        if self._server is None:
            raise RuntimeError("the sidecar is not running")
        return self._server

    @property
    def runtime(self) -> Runtime:
        return self.server.runtime

    def start(self) -> str:
        """Start serving; returns the address once the backend has started."""
        self._thread = threading.Thread(target=self._run, name="execpods-sidecar", daemon=True)
        self._thread.start()
        if not self._ready.wait(self._start_timeout):
            raise TimeoutError(f"the sidecar did not start within {self._start_timeout} s")
        if self._error is not None:
            raise self._error
        return self.address

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:
            self._error = error
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runtime = await asyncio.to_thread(self._factory, self.settings)
        server = SidecarServer(runtime)
        self._server = server
        self.address = await server.start()
        self._ready.set()
        await self._stop.wait()
        await server.stop()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop gracefully (streams end, pods deleted as configured) and wait for it."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop has just ended
                loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"the sidecar did not stop within {timeout} s")

    def __enter__(self) -> EmbeddedSidecar:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
