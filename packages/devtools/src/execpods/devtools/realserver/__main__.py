"""``python -m execpods.devtools.realserver``: build the Go programs, or run the real server.

build [NAME...]     build (or reuse) the programs, default the real server's; print records
path NAME           print the cached binary's path, building it first if missing
start [--nodes N] [-- CMD...]
                    start the server, print its URL and kubeconfig path; run CMD against it
                    (KUBECONFIG set) and return its exit code, or run until SIGINT/SIGTERM;
                    with --nodes, N simulated nodes (kubesim's node simulation, as kwok's)
                    schedule and run the pods of every namespace
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading

from execpods.devtools.realserver import gobuild
from execpods.devtools.realserver.server import RealServer, ServerOptions
from execpods.kubesim.nodes import ClusterConfig
from execpods.kubesim.nodesim import NodeSimulator


def _build(names: list[str]) -> int:
    for name in names or list(gobuild.CHECK_BUILDS):
        if name not in gobuild.PROGRAMS:
            sys.exit(f"unknown program {name!r}; one of {sorted(gobuild.PROGRAMS)}")
        path = gobuild.binary(name)
        record = gobuild.record(name)
        figures = (
            f"built in {record.seconds:.0f} s by {record.go_version}, "
            f"{record.size_bytes / 2**20:.1f} MiB"
            if record
            else "no build record"
        )
        print(f"{name} {gobuild.PROGRAMS[name].version}: {path} ({figures})", flush=True)
    return 0


def _start(args: argparse.Namespace) -> int:
    options = ServerOptions(
        max_requests_inflight=args.max_requests_inflight,
        max_mutating_requests_inflight=args.max_mutating_requests_inflight,
        controllers=not args.no_controllers,
    )
    with RealServer(options=options) as server, _nodes(server, args.nodes):
        print(server.url, flush=True)
        print(server.kubeconfig_path, flush=True)
        command = [c for c in args.command if c != "--"]
        if command:
            env = {**os.environ, "KUBECONFIG": str(server.kubeconfig_path)}
            return subprocess.run(command, env=env, check=False).returncode
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
    return 0


def _nodes(server: RealServer, count: int) -> contextlib.AbstractContextManager[object]:
    """``count`` simulated nodes running every namespace's pods on the wall clock (none: 0)."""
    if count <= 0:
        return contextlib.nullcontext()
    return NodeSimulator(
        url=server.url,
        token=server.token,
        ca_file=str(server.ca_path),
        config=ClusterConfig(nodes=count, node_prefix="sim-node-"),
    )


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m execpods.devtools.realserver")
    sub = parser.add_subparsers(dest="verb", required=True)
    build = sub.add_parser("build", help="build (or reuse) the pinned Go programs")
    build.add_argument("names", nargs="*")
    path = sub.add_parser("path", help="print a program's cached binary path")
    path.add_argument("name", choices=sorted(gobuild.PROGRAMS))
    start = sub.add_parser("start", help="run the real API server on loopback")
    defaults = ServerOptions()
    start.add_argument("--max-requests-inflight", type=int, default=defaults.max_requests_inflight)
    start.add_argument(
        "--max-mutating-requests-inflight",
        type=int,
        default=defaults.max_mutating_requests_inflight,
    )
    start.add_argument("--no-controllers", action="store_true", help="no controller manager")
    start.add_argument(
        "--nodes",
        type=int,
        default=0,
        help="simulated nodes that schedule and run every namespace's pods (default: none)",
    )
    start.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.verb == "build":
        return _build(args.names)
    if args.verb == "path":
        print(gobuild.binary(args.name))
        return 0
    return _start(args)


if __name__ == "__main__":
    sys.exit(main())
