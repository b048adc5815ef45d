"""``kubesim``: run the simulator standalone until SIGINT or SIGTERM.

Prints the URL (and the kubeconfig path) on stdout, one per line, so a script in any language can
start it with ``--port 0`` and read where it listens.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

from execpods.kubesim.api import KubeSim
from execpods.kubesim.cluster import ClusterConfig

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    c = ClusterConfig()  # the cluster flags default to the config's own defaults
    p = argparse.ArgumentParser(prog="kubesim", description=__doc__)
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
        "--deterministic", action="store_true", help="virtual clock, moved via /_kubesim/advance"
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if len(args.start_latency) > 2:
        parser.error("--start-latency takes MEAN and at most one JITTER")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    mean = args.start_latency[0]
    jitter = args.start_latency[1] if len(args.start_latency) > 1 else 0.0
    config = ClusterConfig(
        nodes=args.nodes,
        pods_per_node=args.node_capacity,
        schedule_delay=args.schedule_delay,
        start_latency=mean,
        start_jitter=jitter,
        stop_latency=args.stop_latency,
        seed=args.seed,
        failure_rate=args.failure_rate,
        failure_after=args.failure_after,
        image_pull_failures=tuple(args.image_pull_failure),
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    sim = KubeSim(
        cluster=config,
        deterministic=args.deterministic,
        host=args.host,
        port=args.port,
        event_window=args.event_window,
        bookmark_interval=args.bookmark_interval,
        kubeconfig_path=args.kubeconfig_out,
        websocket_watch=not args.no_websocket_watch,
    )
    with sim:
        print(sim.url, flush=True)
        print(sim.kubeconfig_path, flush=True)
        while not stop.wait(3600):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
