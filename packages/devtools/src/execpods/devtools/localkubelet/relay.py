"""The API server as pods reach it: `https://kubernetes.default.svc` with the service account's CA.

Each pod's sandbox forwards its 127.0.0.1:443 to a Unix socket in the pod's folder; `ApiRelay`
serves those sockets. Against an HTTPS API server (kube-apiserver) it passes the bytes through:
the pod verifies the server with the server's own CA. Against a plain-HTTP one (kubesim) it ends
TLS itself, with a certificate for the Service's names and 127.0.0.1 signed by a CA made for
this kubelet (`openssl`), and forwards plain HTTP: in-cluster clients (the official Python
client, fabric8 in Spark) accept only HTTPS.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["ApiRelay", "make_certificates"]

SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
)


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) for the `kubernetes` Service's names."""
    ca_key, ca_crt = folder / "ca.key", folder / "ca.crt"
    key, csr, crt, ext = folder / "tls.key", folder / "tls.csr", folder / "tls.crt", folder / "ext"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = [*("openssl", "req", "-x509", *ec, "-days", "2", "-subj", "/CN=local-kubelet-ca")]
    run += ["-keyout", str(ca_key), "-out", str(ca_crt)]
    run += ["-addext", "basicConstraints=critical,CA:TRUE"]
    run += ["-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    subprocess.run(run, check=True, capture_output=True)
    subprocess.run(
        [
            "openssl",
            "req",
            *ec,
            "-subj",
            "/CN=kube-apiserver",
            "-keyout",
            str(key),
            "-out",
            str(csr),
        ],
        check=True,
        capture_output=True,
    )
    names = ",".join([*(f"DNS:{n}" for n in SERVICE_NAMES), "IP:127.0.0.1"])
    ext.write_text(
        f"subjectAltName={names}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    sign = ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key)]
    sign += ["-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt)]
    subprocess.run(sign, check=True, capture_output=True)
    return ca_crt, crt, key


class ApiRelay:
    """Serves each pod's `api.sock`: the pod's connections to the API server (one asyncio loop
    in a thread of its own; TLS is ended there, on one thread per connection's both ways)."""

    def __init__(self, api_url: str, folder: Path, *, ca_file: Path | None = None) -> None:
        parts = urlsplit(api_url)
        tls = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if tls else 80)
        self._context: ssl.SSLContext | None = None
        if tls:
            if ca_file is None:
                raise ValueError(f"an HTTPS API server ({api_url}) needs its CA file")
            self.ca_file = ca_file
        else:
            self.ca_file, crt, key = make_certificates(folder)
            self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._context.load_cert_chain(crt, key)
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.AbstractServer] = []
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def serve(self, path: Path) -> None:
        """Accept on the Unix socket `path` (a pod's `api.sock`) until `close`."""

        async def start() -> None:
            server = await asyncio.start_unix_server(self._relay, str(path), ssl=self._context)
            self._servers.append(server)

        asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout=10)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(OSError, RuntimeError):
                if dst.can_write_eof():
                    dst.write_eof()

        writers = [writer]
        try:
            up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
            writers.append(up_writer)
            await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            # The API server is not there, or `close` cancelled a connection still open: end
            # quietly (asyncio's stream server logs a connection task that ends cancelled as an
            # error with a traceback, at the end of every run that stops with a pod connected).
            pass
        finally:
            for w in writers:
                with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
                    w.close()

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            self._servers.clear()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(RuntimeError, TimeoutError):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
