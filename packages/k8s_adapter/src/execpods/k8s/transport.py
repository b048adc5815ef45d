"""Pod creates over kept-alive connections: the create path without the client's per-call work.

A scale-up is thousands of POSTs of one shape. Through the official client each costs about
0.5 ms of this process' CPU before the network is involved (measured at 1,000 to 10,000 creates:
pydantic's validation of the call's arguments, which turns the pod dict into a `V1Pod` model, the
client's `param_serialize` and `sanitize_for_serialization` turning it back, urllib3's pool
bookkeeping), against about 0.1 ms for the same POST over a kept-alive `http.client` connection
with a body serialized once by orjson. On a 2-core machine shared with the API server, that CPU is
the create rate. So creates (only creates: the watch and the lists stay on the official client,
whose models and streaming they use) go through `CreateTransport`:

- one `http.client` connection per create in flight, kept alive and reused (a LIFO pool sized to
  `execpods.allocation.batch.concurrency`, so a round's creates never wait for a connection and
  the most recently used, warmest connection goes first);
- the client's own configuration: its host, its TLS settings (CA, client certificate, verify),
  its headers (User-Agent: the API server's flow identity) and its credentials, asked for on
  every request (a token that the kubeconfig's exec plugin refreshes stays fresh);
- the answer's body is read (the connection is reused only after it) but parsed only when the
  status is an error, into the same typed errors as every other call (`errors.py`).

A configuration this transport does not speak (an HTTP proxy, a TLS server name other than the
host) keeps creates on the official client: `CreateTransport.supports` says which.
"""

from __future__ import annotations

import http.client
import queue
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

IDLE_LIMIT = 30.0
"""A connection idle this long is closed rather than reused: servers and proxies drop idle
keep-alive connections (Go's http.Server after its IdleTimeout), and a POST written into a
connection the server is closing may or may not have been read."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer: status, body (read whole) and the headers a caller needs."""

    status: int
    body: bytes
    retry_after: str | None


class CreateTransport:
    """POSTs of JSON bodies over a pool of kept-alive connections (see the module)."""

    def __init__(
        self,
        configuration: Any,
        *,
        headers: Callable[[], Mapping[str, str]],
        pool_size: int,
        connect_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        url = urllib.parse.urlsplit(str(configuration.host))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"the API server's URL {configuration.host!r} is not http(s)")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._headers = headers
        self._connect_timeout = connect_timeout
        self._clock = clock
        self._context = _tls_context(configuration) if self._https else None
        self._idle: queue.LifoQueue[tuple[http.client.HTTPConnection, float]] = queue.LifoQueue(
            maxsize=max(1, pool_size)
        )
        self.connections = 0
        """Connections opened so far (for tests and the benchmark)."""

    @staticmethod
    def supports(configuration: Any) -> bool:
        """Whether this transport can speak to the server as the client would: no proxy, no TLS
        server name or hostname override."""
        url = urllib.parse.urlsplit(str(getattr(configuration, "host", "")))
        return (
            url.scheme in ("http", "https")
            and not getattr(configuration, "proxy", None)
            and not getattr(configuration, "tls_server_name", None)
            and not getattr(configuration, "assert_hostname", None)
        )

    def post(self, path: str, body: bytes, *, timeout: float) -> Answer:
        """POST `body` (JSON) to `path`; the answer, whatever its status. Raises `OSError` or
        `http.client.HTTPException` when no answer came."""
        headers = {
            **self._headers(),
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        connection = self._take()
        try:
            if connection.sock is None:
                connection.connect()  # within the connect timeout the connection was made with
                # Headers and body leave in two writes: without this, Nagle's algorithm holds
                # the body until the headers are acknowledged (as urllib3 sets it too).
                _socket_of(connection).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.timeout = timeout
            _socket_of(connection).settimeout(timeout)
            connection.request("POST", self._prefix + path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            answer = Answer(
                status=response.status, body=data, retry_after=response.getheader("Retry-After")
            )
            reusable = not response.will_close
        except BaseException:
            connection.close()
            raise
        if reusable:
            self._give_back(connection)
        else:
            connection.close()
        return answer

    def _take(self) -> http.client.HTTPConnection:
        now = self._clock()
        while True:
            try:
                connection, since = self._idle.get_nowait()
            except queue.Empty:
                break
            if now - since < IDLE_LIMIT:
                return connection
            connection.close()
        self.connections += 1
        if self._context is not None:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self._connect_timeout, context=self._context
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout)

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        try:
            self._idle.put_nowait((connection, self._clock()))
        except queue.Full:
            connection.close()

    def close(self) -> None:
        """Close the idle connections (those in use close when their call ends)."""
        while True:
            try:
                connection, _ = self._idle.get_nowait()
            except queue.Empty:
                return
            connection.close()


def _socket_of(connection: http.client.HTTPConnection) -> socket.socket:
    sock: socket.socket | None = connection.sock
    if sock is None:
        raise ConnectionError("the connection has no socket")
    return sock


def _tls_context(configuration: Any) -> ssl.SSLContext:
    """The TLS the client's configuration asks for: its CA (else the system's), its client
    certificate, and no verification only when it says so."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context


__all__ = ["IDLE_LIMIT", "Answer", "CreateTransport"]
