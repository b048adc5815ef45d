"""Serving one watch request: chunked HTTP, or WebSocket messages for an upgrade request.

Java's fabric8 client (Spark's) opens every watch as a WebSocket upgrade first; the official
Python client streams over chunked HTTP. Both get the same events from the same store; only the
framing differs. A server that cannot serve WebSockets answers the upgrade with 503, which
fabric8 retries and then takes as "fall back to an HTTP watch" (kubesim does that when
``websocket_watch`` is off).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from io import BufferedIOBase
from typing import Protocol

from execpods.kubesim import websocket as ws
from execpods.kubesim.bodies import Status
from execpods.kubesim.errors import ApiError
from execpods.kubesim.params import parse_bool
from execpods.kubesim.store import PodStore, Watcher, watch_line

__all__ = ["WatchHandler", "WatchSource", "serve_watch"]


class WatchSource(Protocol):
    """What a watch needs of a resource's API: its store, selectors, versions and bookmarks."""

    @property
    def store(self) -> PodStore: ...
    def open_watch(
        self, namespace: str | None, query: dict[str, str]
    ) -> tuple[Watcher | None, list[bytes], Status | None]: ...
    def bookmark(self, rv: int, *, initial_events_end: bool = False) -> bytes: ...


class WatchHandler(Protocol):
    """The parts of the request handler a watch uses."""

    rfile: BufferedIOBase
    wfile: BufferedIOBase
    connection: socket.socket
    close_connection: bool

    def header(self, name: str, default: str = "") -> str: ...
    def log_once(self, status: int) -> None: ...
    def http_date(self) -> str: ...


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def serve_watch(
    handler: WatchHandler,
    namespace: str | None,
    query: dict[str, str],
    api: WatchSource,
    *,
    bookmark_interval: float,
    websocket_watch: bool,
) -> None:
    """Serve a watch on ``handler``'s connection until it times out, closes or fails."""
    upgrade = ws.is_upgrade(
        {"upgrade": handler.header("Upgrade"), "connection": handler.header("Connection")}
    )
    if upgrade and not websocket_watch:
        raise ApiError(
            503,
            "ServiceUnavailable",
            "WebSocket watches are turned off in this kubesim; watch over HTTP",
        )
    bookmarks = parse_bool(query.get("allowWatchBookmarks"), "allowWatchBookmarks")
    timeout_text = query.get("timeoutSeconds")
    try:
        timeout = float(timeout_text) if timeout_text else 0.0
        # 0 is no timeout asked for, as in kube-apiserver: the server's own (30 minutes).
        timeout = timeout if timeout > 0 else 1800.0
    except ValueError:
        raise ApiError.bad_request(f"invalid timeoutSeconds {timeout_text!r}") from None
    key = handler.header("Sec-WebSocket-Key")
    if upgrade and not key:
        raise ApiError.bad_request("a WebSocket upgrade needs a Sec-WebSocket-Key header")
    watcher, initial, error = api.open_watch(namespace, query)
    # A watch is in the log from its start, not only once it ends; a WebSocket one as 101.
    handler.log_once(101 if upgrade else 200)
    stream = _Stream(
        watcher=watcher, timeout=timeout, bookmarks=bookmarks, interval=bookmark_interval, api=api
    )
    try:
        if upgrade:
            _serve_websocket(handler, key, stream, initial, error)
        else:
            _serve_chunked(handler, stream, initial, error)
    finally:
        if watcher is not None:
            api.store.unwatch(watcher)


def _serve_chunked(
    handler: WatchHandler, stream: _Stream, initial: list[bytes], error: Status | None
) -> None:
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Transfer-Encoding: chunked\r\nDate: {handler.http_date()}\r\n\r\n"
    ).encode("latin-1")
    wfile = handler.wfile

    def emit(lines: list[bytes]) -> None:
        if lines:
            wfile.write(b"".join(_chunk(line) for line in lines))

    try:
        wfile.write(head + b"".join(_chunk(line) for line in initial))
        if stream.watcher is not None:
            error = stream.run(emit)
            if stream.watcher.abrupt:
                handler.close_connection = True
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
        tail = []
        if error is not None:
            tail.append(_chunk(watch_line("ERROR", error)))
        tail.append(b"0\r\n\r\n")
        wfile.write(b"".join(tail))
    except OSError:
        handler.close_connection = True


def _serve_websocket(
    handler: WatchHandler,
    key: str,
    stream: _Stream,
    initial: list[bytes],
    error: Status | None,
) -> None:
    """The same events as text messages on an upgraded connection, then a close frame."""
    handler.close_connection = True  # the connection is the WebSocket's until it closes
    head = (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {ws.accept_key(key)}\r\nDate: {handler.http_date()}\r\n\r\n"
    ).encode("latin-1")
    watcher = stream.watcher
    channel = ws.WebSocketChannel(
        handler.rfile, handler.wfile, watcher.close if watcher else (lambda: None)
    )
    try:
        handler.wfile.write(head)
        channel.start()
        channel.send_text(initial)
        if watcher is not None:
            error = stream.run(channel.send_text)
            if watcher.abrupt:
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
        if error is not None and not channel.closed:
            channel.send_text([watch_line("ERROR", error)])
        channel.close()
        channel.join(2.0)
    except OSError:
        pass


class _Stream:
    """The event loop of one watch: events as they commit, BOOKMARKs, the timeout."""

    def __init__(
        self,
        *,
        watcher: Watcher | None,
        timeout: float,
        bookmarks: bool,
        interval: float,
        api: WatchSource,
    ) -> None:
        self.watcher = watcher
        self._timeout = timeout
        self._bookmarks = bookmarks
        self._interval = interval
        self._api = api

    def run(self, emit: Callable[[list[bytes]], None]) -> Status | None:
        """Send events until the timeout (None) or until the watch is closed (its error)."""
        watcher = self.watcher
        assert watcher is not None
        deadline = time.monotonic() + self._timeout
        next_bookmark = time.monotonic() + self._interval
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            wait = deadline - now
            if self._bookmarks:
                wait = min(wait, max(0.0, next_bookmark - now))
            batch = watcher.wait(wait)
            out = []
            for ev in batch:
                kind = watcher.translate(ev)
                if kind is not None:
                    out.append(ev.encode(kind))
            emit(out)
            if watcher.closed:
                return watcher.error
            if self._bookmarks and time.monotonic() >= next_bookmark:
                emit([self._api.bookmark(watcher.last_rv)])
                next_bookmark = time.monotonic() + self._interval
        if self._bookmarks:
            emit([self._api.bookmark(watcher.last_rv)])
        return None
