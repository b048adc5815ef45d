"""Watches over WebSocket (RFC 6455), as the API server serves them.

Java's fabric8 client (Spark's) opens every watch as a WebSocket upgrade and reads one watch
event per text message; the API server answers such a request with ``101 Switching Protocols``
and the same events it would stream over chunked HTTP. Only what a watch needs is here: the
handshake, unmasked server frames, and reading the client's frames for ping, pong and close.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import threading
from collections.abc import Callable
from io import BufferedIOBase

__all__ = [
    "CLOSE",
    "PING",
    "PONG",
    "TEXT",
    "FrameError",
    "WebSocketChannel",
    "accept_key",
    "encode_frame",
    "is_upgrade",
    "read_frame",
]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_MAX_CLIENT_FRAME = 1 << 20  # a watch client only sends small control frames


class FrameError(ValueError):
    """The peer sent something that is not a WebSocket frame we accept."""


def is_upgrade(headers: dict[str, str]) -> bool:
    """True for a WebSocket upgrade request (header names lower-cased)."""
    connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    return headers.get("upgrade", "").lower() == "websocket" and "upgrade" in connection


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` value for a client's ``Sec-WebSocket-Key``."""
    digest = hashlib.sha1(key.strip().encode("latin-1") + _GUID).digest()
    return base64.b64encode(digest).decode("ascii")


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """One final, unmasked frame (servers never mask)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def _read_exact(rfile: BufferedIOBase, n: int) -> bytes:
    data = rfile.read(n)
    if data is None or len(data) < n:
        raise EOFError("the WebSocket peer closed the connection")
    return data


def read_frame(rfile: BufferedIOBase) -> tuple[int, bytes]:
    """Read one client frame: (opcode, unmasked payload). Raises EOFError or FrameError."""
    b0, b1 = _read_exact(rfile, 2)
    opcode = b0 & 0x0F
    if not b1 & 0x80:
        raise FrameError("a client frame must be masked")
    n = b1 & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", _read_exact(rfile, 2))
    elif n == 127:
        (n,) = struct.unpack("!Q", _read_exact(rfile, 8))
    if n > _MAX_CLIENT_FRAME:
        raise FrameError(f"client frame too large ({n} bytes)")
    mask = _read_exact(rfile, 4)
    payload = bytearray(_read_exact(rfile, n))
    for i in range(n):
        payload[i] ^= mask[i & 3]
    return opcode, bytes(payload)


class WebSocketChannel:
    """The server side of one upgraded connection: sends messages, answers the client's frames.

    A reader thread answers pings and notices the client's close or disconnect, calling
    ``on_close`` so that a watch waiting for events ends at once. Writes from the watch and
    from the reader are serialised by a lock.
    """

    def __init__(
        self, rfile: BufferedIOBase, wfile: BufferedIOBase, on_close: Callable[[], None]
    ) -> None:
        self._rfile = rfile
        self._wfile = wfile
        self._on_close = on_close
        self._lock = threading.Lock()
        self.closed = False
        self._close_sent = False
        self._reader = threading.Thread(
            target=self._read_loop, name="kubesim-ws-reader", daemon=True
        )

    def start(self) -> None:
        self._reader.start()

    def _write(self, data: bytes) -> None:
        with self._lock:
            self._wfile.write(data)
            self._wfile.flush()

    def send_text(self, messages: list[bytes]) -> None:
        """Send each message as one text frame, in one write."""
        if messages:
            self._write(b"".join(encode_frame(TEXT, m) for m in messages))

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Send a close frame (once); the reader waits for the client's answer or EOF."""
        with self._lock:
            if self._close_sent:
                return
            self._close_sent = True
            try:
                payload = struct.pack("!H", code) + reason.encode("utf-8")[:120]
                self._wfile.write(encode_frame(CLOSE, payload))
                self._wfile.flush()
            except OSError:
                pass

    def join(self, timeout: float) -> None:
        self._reader.join(timeout)

    def _read_loop(self) -> None:
        try:
            while True:
                opcode, payload = read_frame(self._rfile)
                if opcode == PING:
                    self._write(encode_frame(PONG, payload))
                elif opcode == CLOSE:
                    code = payload[:2] if len(payload) >= 2 else struct.pack("!H", 1000)
                    with self._lock:
                        if not self._close_sent:
                            self._close_sent = True
                            self._wfile.write(encode_frame(CLOSE, code))
                            self._wfile.flush()
                    break
                # Text, binary, pong and continuation frames mean nothing to a watch.
        except (EOFError, FrameError, OSError, ValueError):
            pass
        finally:
            self.closed = True
            self._on_close()
