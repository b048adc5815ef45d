"""Spark + the execpods plugin against the sidecar alone, both timed from the RequestTotal for N.

`.venv/bin/python -m execpods.devtools.bench.plugin_path [--executors 1000] [--rounds 1]`
(builds the plugin jar first; about 2 minutes a round on this machine).

Four rows a round, back to back, each on a fresh kubesim (idle API, pods start in 1 s +/- 0.5 s,
served by this process): the sidecar alone under the default (`adaptive`) and the static rate
policy, driven by a client that asks for N executors; and real Spark 4.3 allocating through the
plugin to an in-process sidecar under the same two policies. Every row is timed from the moment
the sidecar holds a RequestTotal for N (for the sidecar alone, the call; for Spark, the first
target of N the plugin sent, polled from the sidecar) to N pods Running, so the two paths are
timed from the same event (issue 34). The ratio is each Spark row against the sidecar alone under
the same policy; the load average of the machine is printed beside each row.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execpods.client import AllocatorClient
from execpods.devtools.simulated import simulator_properties
from execpods.devtools.spark import spark_time_to_target
from execpods.devtools.spark_plugin import build as build_plugin
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

STATIC = {"execpods.kubernetes.api.ratePolicy": "static"}
POLICIES: dict[str, Mapping[str, str]] = {"adaptive": {}, "static bucket": STATIC}


@dataclass(frozen=True, slots=True)
class Row:
    path: str
    policy: str
    seconds: float
    load: float


def _cluster(executors: int) -> ClusterConfig:
    return ClusterConfig(nodes=math.ceil(executors / 110) + 2, start_latency=1.0, start_jitter=0.5)


def sidecar_alone(executors: int, policy: Mapping[str, str]) -> float:
    running: set[str] = set()
    changed = threading.Condition()

    def on_event(event: Any) -> None:
        raw = event.new
        name = raw["metadata"]["name"]
        with changed:
            if event.type != "DELETED" and (raw.get("status") or {}).get("phase") == "Running":
                running.add(name)
            else:
                running.discard(name)
            changed.notify_all()

    with KubeSim(cluster=_cluster(executors), event_window=4 * executors) as sim:
        sim.store.add_listener(on_event)
        props = simulator_properties(
            sim.url, "alone", **{"spark.executor.instances": "0", **policy}
        )
        with EmbeddedSidecar(props) as sidecar, AllocatorClient(sidecar.address) as client:
            started = time.perf_counter()
            client.request_total(executors)
            with changed:
                if not changed.wait_for(lambda: len(running) >= executors, 600):
                    raise TimeoutError(f"{len(running)} of {executors} Running after 600 s")
            return time.perf_counter() - started


def with_plugin(executors: int, policy: Mapping[str, str], jar: Path) -> float:
    with KubeSim(cluster=_cluster(executors), event_window=4 * executors) as sim:
        run = spark_time_to_target(
            sim.url, executors, plugin_jar=jar, sidecar_conf=dict(policy), timeout=600.0
        )
    if run.seconds_from_request is None:
        raise RuntimeError("the sidecar never held a target of all the executors")
    return run.seconds_from_request


def report(rows: list[Row]) -> str:
    alone = {r.policy: r.seconds for r in rows if r.path == "sidecar alone"}
    lines = [
        "| path | policy | seconds from the RequestTotal | plugin / sidecar alone | load |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        ratio = "-"
        if r.path != "sidecar alone" and r.policy in alone:
            ratio = f"{r.seconds / alone[r.policy]:.2f}x"
        lines.append(f"| {r.path} | {r.policy} | {r.seconds:.2f} | {ratio} | {r.load:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executors", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="execpods-plugin-") as workdir:
        jar = build_plugin(Path(workdir))
        for _ in range(args.rounds):
            for policy, props in POLICIES.items():
                for path in ("sidecar alone", "Spark 4.3 + plugin"):
                    if path == "sidecar alone":
                        seconds = sidecar_alone(args.executors, props)
                    else:
                        seconds = with_plugin(args.executors, props, jar)
                    row = Row(path=path, policy=policy, seconds=seconds, load=os.getloadavg()[0])
                    print(f"{path} | {policy}: {seconds:.2f} s (load {row.load:.1f})", flush=True)
                    rows.append(row)
    print()
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
