"""``kubesim``: run the simulator standalone until SIGINT or SIGTERM.

Prints the URL (and the kubeconfig path) on stdout, one per line, so a script in any language can
start it with ``--port 0`` and read where it listens.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
from importlib.metadata import version
from pathlib import Path
from types import FrameType

import orjson
import yaml
from execpods.kubesim.api import KubeSim
from execpods.kubesim.bodies import JsonObject, JsonValue
from execpods.kubesim.cluster import ClusterConfig
from execpods.kubesim.fit import quantity_request
from execpods.kubesim.limits import DISTRIBUTIONS

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    c = ClusterConfig()  # the cluster flags default to the config's own defaults
    p = argparse.ArgumentParser(prog="kubesim", description=__doc__)
    p.add_argument("--version", action="version", version=f"kubesim {version('execpods-kubesim')}")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to bind (default 0: any free port)")
    p.add_argument("--kubeconfig-out", default=None, help="write a kubeconfig to this path")
    p.add_argument(
        "--nodes", type=int, default=c.nodes, help="number of nodes (default %(default)s)"
    )
    p.add_argument(
        "--node-capacity",
        type=int,
        default=c.pods_per_node,
        help="pods per node (default %(default)s)",
    )
    p.add_argument(
        "--node-cpu",
        default=c.node_cpu,
        metavar="QUANTITY",
        help="each node's allocatable CPU, e.g. 4 or 3500m (default: requests are not counted)",
    )
    p.add_argument(
        "--node-memory",
        default=c.node_memory,
        metavar="QUANTITY",
        help="each node's allocatable memory, e.g. 16Gi (default: requests are not counted)",
    )
    p.add_argument(
        "--schedule-delay", type=float, default=c.schedule_delay, help="seconds before scheduling"
    )
    p.add_argument(
        "--start-latency",
        type=float,
        nargs="+",
        default=[c.start_latency, c.start_jitter],
        metavar=("MEAN", "JITTER"),
        help="container start latency in seconds: mean and optional +/- jitter "
        f"(default {c.start_latency:g} {c.start_jitter:g})",
    )
    p.add_argument(
        "--start-distribution",
        choices=DISTRIBUTIONS,
        default=c.start_distribution,
        help="how start latencies spread around the mean: uniform (mean +/- jitter), fixed, "
        "normal or lognormal (jitter is the standard deviation) (default %(default)s)",
    )
    p.add_argument(
        "--create-rate",
        type=float,
        default=c.create_rate,
        metavar="PER_SECOND",
        help="cap pod creates per second; beyond it 429 with Retry-After (default 0: no cap)",
    )
    p.add_argument(
        "--create-burst",
        type=int,
        default=c.create_burst,
        help="creates allowed at once under --create-rate (default 0: one second's worth)",
    )
    p.add_argument(
        "--stop-latency", type=float, default=c.stop_latency, help="graceful stop time (s)"
    )
    p.add_argument("--seed", type=int, default=c.seed, help="random seed (default %(default)s)")
    p.add_argument(
        "--failure-rate", type=float, default=c.failure_rate, help="share of pods that fail"
    )
    p.add_argument(
        "--failure-after",
        type=float,
        default=c.failure_after,
        help="mean run time before a random failure (s)",
    )
    p.add_argument(
        "--image-pull-failure",
        action="append",
        default=[],
        metavar="IMAGE",
        help="an image that fails to pull (repeatable)",
    )
    p.add_argument("--event-window", type=int, default=10_000, help="events kept for watches")
    p.add_argument(
        "--bookmark-interval", type=float, default=30.0, help="seconds between BOOKMARKs"
    )
    p.add_argument(
        "--rbac",
        action="append",
        default=[],
        metavar="FILE",
        help="enforce RBAC from these manifests (YAML or JSON; repeatable)",
    )
    p.add_argument(
        "--sa-token",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME=TOKEN",
        help="a bearer token for a service account (repeatable); the admin token is in the "
        "kubeconfig",
    )
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NAME",
        help="a namespace that exists from the start, beside default (repeatable); others "
        "exist once created, as in a cluster",
    )
    p.add_argument(
        "--deterministic", action="store_true", help="virtual clock, moved via /_kubesim/advance"
    )
    p.add_argument(
        "--expect-clean",
        action="store_true",
        help="with a COMMAND: exit 3 if it leaves pods, ConfigMaps or Services behind",
    )
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="run COMMAND against the simulator ({url} and {master} in it are replaced; "
        "KUBESIM_URL, KUBESIM_MASTER and KUBECONFIG are set), then exit with its code",
    )
    p.add_argument(
        "--no-websocket-watch",
        action="store_true",
        help="answer WebSocket watch upgrades with 503 (clients fall back to HTTP watches)",
    )
    p.add_argument(
        "--log-level", default="WARNING", help="logging level (DEBUG logs every request)"
    )
    return p


def _config(args: argparse.Namespace) -> ClusterConfig:
    """The cluster the flags describe (ValueError for values ClusterConfig refuses)."""
    for flag, quantity in (("--node-cpu", args.node_cpu), ("--node-memory", args.node_memory)):
        try:
            quantity_request(quantity, None)
        except ValueError as exc:
            raise ValueError(f"{flag} {quantity!r} is not a quantity: {exc}") from None
    mean = args.start_latency[0]
    jitter = args.start_latency[1] if len(args.start_latency) > 1 else 0.0
    return ClusterConfig(
        nodes=args.nodes,
        pods_per_node=args.node_capacity,
        node_cpu=args.node_cpu,
        node_memory=args.node_memory,
        schedule_delay=args.schedule_delay,
        start_latency=mean,
        start_jitter=jitter,
        start_distribution=args.start_distribution,
        create_rate=args.create_rate,
        create_burst=args.create_burst,
        stop_latency=args.stop_latency,
        seed=args.seed,
        failure_rate=args.failure_rate,
        failure_after=args.failure_after,
        image_pull_failures=tuple(args.image_pull_failure),
    )


def load_manifests(path: str) -> list[JsonObject]:
    """The objects of a manifest file: JSON, or YAML (one or more documents)."""
    text = Path(path).read_text(encoding="utf-8")
    if path.endswith(".json"):
        loaded: JsonValue = orjson.loads(text)
        docs: list[object] = list(loaded) if isinstance(loaded, list) else [loaded]
    else:
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: {exc}") from None
    objects = [d for d in docs if isinstance(d, dict)]
    if len(objects) != len(docs):
        raise ValueError(f"{path}: every document must be an object")
    return objects


def _tokens(specs: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for spec in specs:
        account, sep, token = spec.partition("=")
        namespace, slash, name = account.partition("/")
        if not (sep and slash and namespace and name and token):
            raise ValueError(f"--sa-token takes NAMESPACE/NAME=TOKEN, not {spec!r}")
        out.append((namespace, name, token))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if len(args.start_latency) > 2:
        parser.error("--start-latency takes MEAN and at most one JITTER")
    try:
        config = _config(args)
        manifests = [doc for path in args.rbac for doc in load_manifests(path)]
        tokens = _tokens(args.sa_token)
    except (ValueError, OSError, orjson.JSONDecodeError) as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        sim = KubeSim(
            cluster=config,
            deterministic=args.deterministic,
            host=args.host,
            port=args.port,
            event_window=args.event_window,
            bookmark_interval=args.bookmark_interval,
            kubeconfig_path=args.kubeconfig_out,
            rbac=manifests if args.rbac else None,
            websocket_watch=not args.no_websocket_watch,
            namespaces=args.namespace,
        )
    except ValueError as exc:  # a manifest RBAC cannot use
        parser.error(str(exc))
    for namespace, name, token in tokens:
        sim.token_for(name, namespace, token=token)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    with sim:
        print(sim.url, flush=True)
        print(sim.kubeconfig_path, flush=True)
        if command:
            return run_command(sim, command, stop, expect_clean=args.expect_clean)
        while not stop.wait(3600):
            pass
    return 0


def run_command(
    sim: KubeSim, command: list[str], stop: threading.Event, *, expect_clean: bool = False
) -> int:
    """Run ``command`` against ``sim`` (a driver, a test, ``spark-submit``) and return its exit
    code; a summary of what it left and the requests it made goes to stderr as one JSON line.

    SIGINT/SIGTERM to kubesim is passed on as SIGTERM; with ``expect_clean`` a command that
    succeeded but left pods, ConfigMaps or Services behind makes the exit code 3.
    """
    master = f"k8s://{sim.url}"
    argv = [a.replace("{url}", sim.url).replace("{master}", master) for a in command]
    env = {
        **os.environ,
        "KUBESIM_URL": sim.url,
        "KUBESIM_MASTER": master,
        "KUBECONFIG": str(sim.kubeconfig_path),
    }
    try:
        proc = subprocess.Popen(argv, env=env)
    except OSError as exc:
        print(f"kubesim: cannot run {argv[0]!r}: {exc}", file=sys.stderr, flush=True)
        return 127
    while True:
        try:
            code = proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if stop.is_set():
                proc.terminate()
    left = {
        "pods": [p["metadata"]["name"] for p in sim.pods()],
        "configmaps": [c["metadata"]["name"] for c in sim.objects("configmaps")],
        "services": [c["metadata"]["name"] for c in sim.objects("services")],
    }
    watches = [r.status for r in sim.requests() if r.verb == "watch"]
    summary = {
        "exitCode": code,
        "left": left,
        "requests": sim.request_counts(),
        "watchStatuses": sorted(set(watches)),
    }
    print(orjson.dumps(summary).decode(), file=sys.stderr, flush=True)
    if code == 0 and expect_clean and any(left.values()):
        return 3
    return code


if __name__ == "__main__":
    sys.exit(main())
