"""Benchmark the simulator over loopback: ``python -m execpods.devtools.bench.kubesim [--pods N]``.

The simulator runs in its own process (started through the CLI), so the clients measured here do
not share its interpreter lock. Reported:

* requests/s for create, get and list with a raw keep-alive ``http.client`` loop (the server's own
  ceiling on one connection) and with the official ``kubernetes`` client when it is installed;
* watch fan-out: 20 watchers while N pods (10,000 by default) are created from 4 connections:
  events/s delivered and the time until every watcher had seen every pod.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson

__all__ = ["main"]

NS = "bench"
NAMESPACE_SUFFIXES = ("", "-raw", "-small", "-client", "-client-small")


def _pod(name: str) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "bench", "spark-exec-id": name}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
        }
    )


@contextmanager
def _simulator(nodes: int, capacity: int) -> Iterator[tuple[str, int]]:
    cmd = [
        sys.executable,
        "-m",
        "execpods.kubesim.cli",
        "--port",
        "0",
        "--nodes",
        str(nodes),
        "--node-capacity",
        str(capacity),
        "--start-latency",
        "0.5",
        "0.2",
        "--event-window",
        "200000",
        # The namespaces the phases create pods in: as in a cluster, they must exist first.
        *(f"--namespace={NS}{suffix}" for suffix in NAMESPACE_SUFFIXES),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        host, port = url.removeprefix("http://").rsplit(":", 1)
        yield host, int(port)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _rate(label: str, count: int, fn: Callable[[int], None]) -> float:
    started = time.perf_counter()
    for i in range(count):
        fn(i)
    elapsed = time.perf_counter() - started
    rate = count / elapsed
    print(f"  {label:<44} {rate:>9.0f} req/s  ({count} in {elapsed:.2f} s)", flush=True)
    return rate


def _raw_phase(host: str, port: int, count: int) -> dict[str, float]:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    base = f"/api/v1/namespaces/{NS}-raw/pods"

    def call(method: str, path: str, body: bytes | None = None) -> None:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path} -> {resp.status}")

    print("raw http.client, one keep-alive connection:")
    small = f"/api/v1/namespaces/{NS}-small/pods"
    for i in range(10):
        call("POST", small, _pod(f"small-{i}"))
    results = {
        "raw_create": _rate("create", count, lambda i: call("POST", base, _pod(f"raw-{i}"))),
        "raw_get": _rate("get", count, lambda i: call("GET", f"{base}/raw-{i}")),
        "raw_list_10": _rate("list (namespace of 10 pods)", count, lambda i: call("GET", small)),
        "raw_list_selector": _rate(
            f"list (selector matching 1 of {count} pods)",
            count,
            lambda i: call("GET", f"{base}?labelSelector=spark-exec-id%3Draw-{i}"),
        ),
    }
    conn.close()
    return results


def _client_phase(host: str, port: int, count: int) -> dict[str, float]:
    # The simulator never depends on the client; this benchmark alone uses it, when installed, to
    # measure what users see (an explicit exception in the root pyproject's layering contract).
    try:
        from kubernetes import client  # noqa: PLC0415
    except ImportError:
        print("official client: not installed, skipped")
        return {}
    api_client: Any = client.ApiClient(client.Configuration(host=f"http://{host}:{port}"))
    core: Any = client.CoreV1Api(api_client)
    ns = f"{NS}-client"
    for i in range(10):
        core.create_namespaced_pod(f"{ns}-small", orjson.loads(_pod(f"small-{i}")))
    print("official kubernetes client, sequential:")
    results = {
        "client_create": _rate(
            "create_namespaced_pod",
            count,
            lambda i: core.create_namespaced_pod(ns, orjson.loads(_pod(f"c-{i}"))),
        ),
        "client_list_10": _rate(
            "list_namespaced_pod (namespace of 10 pods)",
            count,
            lambda i: core.list_namespaced_pod(f"{ns}-small"),
        ),
        "client_list_10_raw": _rate(
            "list_namespaced_pod, _preload_content=False",
            count,
            lambda i: core.list_namespaced_pod(f"{ns}-small", _preload_content=False).data,
        ),
    }
    api_client.close()
    return results


def _watcher_process(
    target: tuple[str, int, str], watchers: int, pods: int, out: Any, ready: Any
) -> None:
    """Run in a child process: ``watchers`` watches, each counting ADDED events up to ``pods``.

    ``target`` is (host, port, resourceVersion to watch from)."""
    host, port, rv = target
    done: list[tuple[float, int]] = []
    lock = threading.Lock()
    conns = []
    responses = []
    for _ in range(watchers):
        conn = http.client.HTTPConnection(host, port, timeout=600)
        conn.request(
            "GET",
            f"/api/v1/namespaces/{NS}/pods?watch=1&resourceVersion={rv}&timeoutSeconds=600",
        )
        responses.append(conn.getresponse())
        conns.append(conn)

    def read(resp: http.client.HTTPResponse) -> None:
        added = events = 0
        while added < pods:
            line = resp.readline()
            if not line:
                break
            events += 1
            if line.startswith(b'{"type":"ADDED"'):
                added += 1
        with lock:
            done.append((time.monotonic(), events))

    threads = [threading.Thread(target=read, args=(r,)) for r in responses]
    for t in threads:
        t.start()
    ready.set()
    for t in threads:
        t.join()
    for conn in conns:
        conn.close()
    out.put(done)


def _fanout_phase(host: str, port: int, pods: int, watchers: int, writers: int) -> dict[str, float]:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", f"/api/v1/namespaces/{NS}/pods?limit=1")
    rv = orjson.loads(conn.getresponse().read())["metadata"]["resourceVersion"]
    conn.close()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    ready = ctx.Event()
    proc = ctx.Process(
        target=_watcher_process, args=((host, port, rv), watchers, pods, out, ready), daemon=True
    )
    proc.start()
    if not ready.wait(60):
        raise RuntimeError("watchers did not start")

    def create(first: int) -> None:
        c = http.client.HTTPConnection(host, port, timeout=30)
        for i in range(first, pods, writers):
            c.request("POST", f"/api/v1/namespaces/{NS}/pods", body=_pod(f"w-{i}"))
            resp = c.getresponse()
            resp.read()
            if resp.status != 201:
                raise RuntimeError(f"create -> {resp.status}")
        c.close()

    started = time.monotonic()
    threads = [threading.Thread(target=create, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    created = time.monotonic()
    done = out.get(timeout=600)
    proc.join(30)
    last = max(t for t, _ in done)
    events = sum(n for _, n in done)
    create_rate = pods / (created - started)
    print(f"watch fan-out: {watchers} watchers, {pods} pods created from {writers} connections:")
    print(f"  creates                                       {create_rate:>9.0f} req/s")
    print(f"  all pods created after                        {created - started:>9.2f} s")
    print(f"  every watcher saw every pod after             {last - started:>9.2f} s")
    print(f"  events delivered (all watchers)               {events / (last - started):>9.0f} /s")
    return {
        "fanout_create_rate": create_rate,
        "fanout_created_s": created - started,
        "fanout_all_seen_s": last - started,
        "fanout_events_per_s": events / (last - started),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m execpods.devtools.bench.kubesim", description=__doc__
    )
    p.add_argument("--pods", type=int, default=10_000, help="pods created in the fan-out phase")
    p.add_argument("--watchers", type=int, default=20, help="watchers in the fan-out phase")
    p.add_argument("--writers", type=int, default=4, help="creating connections (fan-out)")
    p.add_argument("--requests", type=int, default=2_000, help="requests per simple-rate phase")
    p.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = p.parse_args(argv)
    print(f"kubesim benchmark on {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    results: dict[str, float] = {}
    nodes = max(1, (args.pods + args.requests * 2 + 200) // 110 + 1)
    with _simulator(nodes, 110) as (host, port):
        results.update(_raw_phase(host, port, args.requests))
        results.update(_client_phase(host, port, max(1, args.requests // 2)))
        results.update(_fanout_phase(host, port, args.pods, args.watchers, args.writers))
    if args.json:
        print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
