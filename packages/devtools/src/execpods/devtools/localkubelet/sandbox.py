"""A pod's sandbox (its "pause" process): run inside the pod's own network and UTS namespaces.

`unshare --net --uts python -m execpods.devtools.localkubelet.sandbox POD_DIR HOSTNAME` brings
the namespace's loopback up, sets the pod's hostname, then serves two things until killed:

- the cluster's `kubernetes` Service inside the pod: 127.0.0.1:443 forwarded to the Unix socket
  `POD_DIR/api.sock`, where the kubelet relays to the API server (kubelet.py). The pod's own
  127.0.0.1 is not the host's, so the sidecar and the driver keep the ports the manifests give
  them, and two pods never collide;
- the kubelet's probes, which must run in the pod's network: one line on `POD_DIR/probe.sock`
  (`tcp PORT`, `http PORT PATH`, `grpc PORT [SERVICE]`) answered `ok` or `fail <why>`.

The containers join these namespaces with `nsenter` (container.py).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

API_PORT = 443


def pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""

    def one_way(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=one_way, args=(b, a), daemon=True)
    other.start()
    one_way(a, b)
    other.join()
    a.close()
    b.close()


def probe(line: str) -> str:
    words = line.split()
    kind, port = words[0], int(words[1])
    try:
        if kind == "tcp":
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return "ok"
        if kind == "http":
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", words[2] if len(words) > 2 else "/")
            status = conn.getresponse().status
            return "ok" if 200 <= status < 400 else f"fail HTTP {status}"
        if kind == "grpc":
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub: Any = health_pb2_grpc.HealthStub(channel)
                service = words[2] if len(words) > 2 else ""
                answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1)
            serving = answer.status == health_pb2.HealthCheckResponse.SERVING
            return "ok" if serving else f"fail {answer.status}"
    except (OSError, ValueError) as exc:
        return f"fail {exc}"
    except Exception as exc:
        return f"fail {type(exc).__name__}"
    return f"fail unknown probe {kind}"


def main(argv: list[str]) -> int:
    pod_dir, hostname = Path(argv[0]), argv[1]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    socket.sethostname(hostname)

    class Probes(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline().decode().strip()
            self.wfile.write((probe(line) + "\n").encode())

    probes = socketserver.ThreadingUnixStreamServer(str(pod_dir / "probe.sock"), Probes)
    probes.daemon_threads = True
    threading.Thread(target=probes.serve_forever, daemon=True).start()
    listener = socket.create_server(("127.0.0.1", API_PORT))
    (pod_dir / "ready").write_text("ok")
    while True:
        conn, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(str(pod_dir / "api.sock"))
        except OSError:
            conn.close()
            continue
        threading.Thread(target=pump, args=(conn, upstream), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
