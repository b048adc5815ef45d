"""One rate policy on every server a user meets: the cross-model benchmark (issue 34).

`python3 tools/dev.py bench --only servers` (or `.venv/bin/python -m
execpods.devtools.bench.servers [--models idle,cap,...] [--apps 1,2,10] [--quick] [--out docs]`).

Real time over HTTP, as `congestion.py`: every driver is an `execpods-sidecar serve` process with
its own app id (its own APF flow), on one kubesim (1 s pod start latency) served by this process.
Each server model is kubesim configured as a user's server behaves:

- `idle`: nothing in the way; the bound's rate is measured in the same run (as-fast-as-possible
  creates over 4 kept-alive connections with a prepared body);
- `real`: a real kube-apiserver and etcd (`realmodel.py`), idle, over TLS with a token, nodes
  simulated over HTTP; its bound measured the same way (429 shares are not counted there);
- `cap`: a hard cap of 100 creates a second, 429 with a Retry-After beyond it, as a gateway, an
  admission webhook or an older server's max-inflight refuses (kubesim's create-rate limit);
- `apf`: API Priority and Fairness, 10 seats held 20-40 ms (250 calls a second when full), 8
  queued requests a flow, 2 s in the queue at most, then 429;
- `slow`: latency rising with no 429 at all: 4 seats (100 calls a second), queues that never
  refuse;
- `5xx`: the APF server failing every call with 503 for 0.3 s of every 3 s (kubesim's bursts);
- `tenants`: the APF server whose other tenants take half the seats for 5 s of every 10 s.

Policies: execpods' default (`adaptive`), the static token bucket (`ratePolicy=static`, 200/s,
burst 300) and Spark 4.3's defaults (20 creates a second, no client limit) where they finish in
about a minute (one application). Every row is the bound (the start latency plus the executors at
the model's capacity, or at the measured rate when idle), then each policy's time to every
application's executors Running as a ratio to it, the sustained create rate against the
capacity, the share of creates answered 429, and for several applications Jain's index of their
throughputs and the slowest against the fastest. The table goes to `<out>/servers-bench.md`, the
plot to `<out>/servers-bench.png`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from execpods.devtools.bench import realmodel
from execpods.devtools.bench.congestion_run import (
    ADAPTIVE,
    BENCH_APF,
    SPARK,
    STATIC,
    Policy,
    Running,
    create_calls,
    create_rate,
    jain,
    kubesim,
    scale,
    sidecars,
    sustained_rate,
)
from execpods.devtools.realserver.server import RealServer
from execpods.kubesim import KubeSim
from execpods.kubesim.apf import ApfConfig
from matplotlib.figure import Figure

START = 1.0
APF = BENCH_APF
SPARK_SECONDS = 60.0
"""Spark's defaults run only where 20 creates a second finish within this."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Model:
    """A server behaviour, as kubesim is configured to show it."""

    key: str
    name: str
    executors: int
    """Executors in all, shared among the applications."""
    capacity: float = 0.0
    """Creates a second the clients can get on average (0: measured, the idle server)."""
    apf: ApfConfig | None = None
    create_rate: float = 0.0
    bursts: tuple[float, float] | None = None
    """503 for `[1]` seconds of every `[0]`."""
    real: bool = False
    """The real kube-apiserver (`realmodel.py`) instead of kubesim."""


MODELS = (
    Model(key="idle", name="idle", executors=1_000),
    Model(key="real", name="real kube-apiserver, idle (TLS, token)", executors=1_000, real=True),
    Model(key="idle10k", name="idle", executors=10_000),
    Model(
        key="cap",
        name="hard cap 100/s, 429 + Retry-After",
        executors=600,
        capacity=100.0,
        create_rate=100.0,
    ),
    Model(
        key="apf",
        name="APF seats and queues",
        executors=1_500,
        capacity=APF.capacity,
        apf=APF,
    ),
    Model(
        key="slow",
        name="latency rising, no 429",
        executors=600,
        capacity=100.0,
        apf=ApfConfig(
            seats=4, service_time=0.02, slowdown=1.0, queue_length=1_000_000, max_wait=3_600.0
        ),
    ),
    Model(
        key="5xx",
        name="APF + 503 bursts (0.3 s in 3 s)",
        executors=1_500,
        capacity=APF.capacity * 0.9,
        apf=APF,
        bursts=(3.0, 0.3),
    ),
    Model(
        key="tenants",
        name="APF, other tenants take half 5 s in 10 s",
        executors=1_200,
        capacity=APF.capacity * 0.75,
        apf=replace(APF, schedule=((5.0, 0.0), (5.0, 0.5))),
    ),
)


@dataclass(slots=True, kw_only=True)
class Row:
    """One policy on one server model with some applications."""

    model: Model
    apps: int
    policy: str
    bound: float
    seconds: list[float | None] = field(default_factory=list)
    creates: int = 0
    throttled: int = 0
    rate: float | None = None
    load: float = 0.0

    @property
    def executors(self) -> int:
        return self.model.executors

    @property
    def time(self) -> float | None:
        done = [s for s in self.seconds if s is not None]
        return max(done) if done and len(done) == len(self.seconds) else None

    @property
    def ratio(self) -> float | None:
        return None if self.time is None else self.time / self.bound

    @property
    def share_429(self) -> float:
        return self.throttled / self.creates if self.creates else 0.0

    @property
    def fairness(self) -> float | None:
        done = [s for s in self.seconds if s is not None]
        if self.apps < 2 or len(done) != self.apps:
            return None
        return jain([1.0 / s for s in done])

    @property
    def spread(self) -> float | None:
        done = [s for s in self.seconds if s is not None]
        if self.apps < 2 or len(done) != self.apps or min(done) <= 0:
            return None
        return max(done) / min(done)


@contextmanager
def _server(model: Model) -> Iterator[tuple[KubeSim, Running]]:
    with kubesim(
        model.executors, start_latency=START, apf=model.apf, create_rate=model.create_rate
    ) as (sim, running):
        if model.bursts is not None:
            every, lasting = model.bursts
            sim.faults.fail_in_bursts(503, every=every, lasting=lasting)
        yield sim, running


def run(model: Model, apps: int, policy: Policy, *, bound: float) -> Row:
    each = model.executors // apps
    names = [f"{model.key}-{i}" for i in range(apps)]
    with _server(model) as (sim, running):
        # maxTotal: the 10,000-executor row asks for exactly the default's most.
        extra = {"execpods.allocation.maxTotal": str(max(10_000, each))}
        with sidecars(sim, names, policy, extra) as drivers:
            scale(drivers, running, each, timeout=max(300.0, 20 * bound))
        creates, throttled = create_calls(sim)
        rate = sustained_rate(sim)
    row = Row(
        model=model,
        apps=apps,
        policy=policy.name,
        bound=bound,
        seconds=[d.seconds for d in drivers],
        creates=creates,
        throttled=throttled,
        rate=rate,
        load=os.getloadavg()[0],
    )
    print(_line(row), flush=True)
    return row


def bound_of(model: Model) -> float:
    """Start latency + executors at the model's capacity (measured now for the idle server);
    a hard cap lets its first second's burst through at once."""
    if model.capacity > 0:
        burst = model.create_rate  # kubesim's cap: a bucket of one second's creates, full
        return START + max(0.0, model.executors - burst) / model.capacity
    sample = min(model.executors, 3_000)
    with kubesim(sample, start_latency=START) as (sim, _):
        rate = create_rate(sim, sample)
    print(f"{model.key}: as-fast-as-possible creates {rate:.0f}/s", flush=True)
    return START + model.executors / rate


def policies_for(model: Model, apps: int, baseline: Policy | None = None) -> list[Policy]:
    chosen = [ADAPTIVE, STATIC, *([baseline] if baseline is not None else [])]
    if apps == 1 and model.executors / 20.0 <= SPARK_SECONDS:
        chosen.append(SPARK)
    return chosen


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _line(row: Row) -> str:
    return (
        f"{row.model.name} | {row.apps} app(s) | {row.policy} | {row.executors:,}: "
        f"{_fmt(row.time, '.1f', ' s')} (bound {row.bound:.1f} s, {_fmt(row.ratio, '.2f', 'x')}), "
        f"429s {row.share_429:.1%} of {row.creates:,}, Jain {_fmt(row.fairness, '.3f')}, "
        f"slowest/fastest {_fmt(row.spread, '.2f', 'x')}, load {row.load:.1f}"
    )


def report(rows: Sequence[Row]) -> str:
    lines = [
        "| server model | apps | executors | bound | policy | time | time / bound | "
        "create rate / capacity | 429 share | Jain | slowest / fastest | load |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        capacity = r.model.capacity
        rate = "-"
        if r.rate is not None:
            rate = f"{r.rate:.0f}/s" + (f" = {r.rate / capacity:.2f}x" if capacity else "")
        lines.append(
            f"| {r.model.name} | {r.apps} | {r.executors:,} | {r.bound:.1f} s | {r.policy} | "
            f"{_fmt(r.time, '.1f', ' s')} | {_fmt(r.ratio, '.2f', 'x')} | {rate} | "
            f"{r.share_429:.1%} | {_fmt(r.fairness, '.3f')} | {_fmt(r.spread, '.2f', 'x')} | "
            f"{r.load:.1f} |"
        )
    return "\n".join(lines)


def plot(rows: Sequence[Row], path: Path) -> Path:
    """time / bound per model and number of applications, one bar per policy."""
    groups = sorted({(r.model.key, r.apps) for r in rows}, key=lambda g: (_order(g[0]), g[1]))
    policies = sorted({r.policy for r in rows})
    figure = Figure(figsize=(max(8.0, 0.9 * len(groups)), 4.5))
    axis = figure.subplots()
    width = 0.8 / len(policies)
    for i, policy in enumerate(policies):
        xs, ys = [], []
        for j, group in enumerate(groups):
            row = next(
                (r for r in rows if (r.model.key, r.apps) == group and r.policy == policy), None
            )
            if row is not None and row.ratio is not None:
                xs.append(j + i * width)
                ys.append(row.ratio)
        axis.bar(xs, ys, width, label=policy)
    axis.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axis.axhline(1.15, color="red", linestyle=":", linewidth=1, label="goal on capped models")
    axis.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))])
    axis.set_xticklabels([f"{k}\n{a} app{'s' if a > 1 else ''}" for k, a in groups], fontsize=8)
    axis.set_ylabel("time to all Running / bound")
    axis.set_yscale("log")
    axis.set_title("One rate policy across server models (lower is better; 1 = the bound)")
    axis.legend(fontsize=8)
    axis.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


def _real_rows(
    model: Model, counts: Sequence[int], baseline: Policy | None, *, quick: bool
) -> list[Row]:
    """The real server's rows (one server for all of them; a fresh namespace each)."""
    if quick:
        model = replace(model, executors=max(100, model.executors // 5))
    rows = []
    with RealServer() as server:
        bound = realmodel.bound_of(server, model.executors)
        for apps in counts:
            for policy in policies_for(model, apps, baseline):
                if policy is SPARK:
                    continue
                seconds = realmodel.run_real(server, model.executors, apps, policy)
                row = Row(
                    model=model,
                    apps=apps,
                    policy=policy.name,
                    bound=bound,
                    seconds=seconds,
                    load=os.getloadavg()[0],
                )
                print(_line(row), flush=True)
                rows.append(row)
    return rows


def _order(key: str) -> int:
    return [m.key for m in MODELS].index(key)


def _models(keys: str) -> list[Model]:
    wanted = [k.strip() for k in keys.split(",") if k.strip()]
    unknown = [k for k in wanted if k not in {m.key for m in MODELS}]
    if unknown:
        raise SystemExit(f"unknown models {unknown}; choose from {[m.key for m in MODELS]}")
    return [m for m in MODELS if m.key in wanted]


def _heartbeat(stop: threading.Event) -> None:
    while not stop.wait(60):
        print(f"... still running (load {os.getloadavg()[0]:.1f})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(m.key for m in MODELS))
    parser.add_argument("--apps", default="1,2,10", help="applications per server (1,2,10)")
    parser.add_argument("--quick", action="store_true", help="a fifth of the executors")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where table and PNG go")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (with its .venv) whose sidecar runs as one more policy, its "
        "defaults: the code before a change, side by side in the same run",
    )
    args = parser.parse_args(argv)
    baseline = None
    if args.baseline is not None:
        executable = args.baseline / ".venv" / "bin" / "execpods-sidecar"
        if not executable.is_file():
            parser.error(f"no sidecar at {executable}: sync that checkout's .venv first")
        baseline = replace(
            ADAPTIVE, name=f"defaults at {args.baseline.name}", executable=executable
        )
    logging.basicConfig(level=logging.ERROR)
    started = time.monotonic()
    stop = threading.Event()
    threading.Thread(target=_heartbeat, args=(stop,), daemon=True).start()
    rows: list[Row] = []
    counts = [int(a) for a in args.apps.split(",") if a.strip()]
    for chosen in _models(args.models):
        if chosen.real:
            rows.extend(_real_rows(chosen, counts, baseline, quick=args.quick))
            continue
        model = replace(chosen, executors=max(100, chosen.executors // 5)) if args.quick else chosen
        bound = bound_of(model)
        for apps in counts:
            if model.key == "idle10k" and apps > 1:
                continue  # the 10,000 row is one application's, as the issue's
            for policy in policies_for(model, apps, baseline):
                rows.append(run(model, apps, policy, bound=bound))
    stop.set()
    table = report(rows)
    print()
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "servers-bench.md").write_text(table + "\n", encoding="utf-8")
    print(f"wrote {plot(rows, args.out / 'servers-bench.png')}")
    print(f"{time.monotonic() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
