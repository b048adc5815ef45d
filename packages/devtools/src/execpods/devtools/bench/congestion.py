"""Congestion control against a loaded API server: four scenarios, policies side by side.

`python3 tools/dev.py bench --only congestion` (or `.venv/bin/python -m
execpods.devtools.bench.congestion [--size small|full] [--scenarios 1,2,3,4] [--out docs]`).

Real time over HTTP: each driver is an `execpods-sidecar serve` process on one kubesim (1 s pod
start latency) served by this process (`congestion_run.py`). Policies: the static token bucket
(`ratePolicy=static`, 200/s, burst 300), congestion control (the default, `adaptive`), and Spark
4.3's defaults where they apply (its allocator's 20 creates a second, no client limit; run where
that finishes in minutes). The capped server is kubesim's API Priority and Fairness: 10 seats held
20-40 ms (about 250 calls a second when full), 8 queued requests a flow, 2 s queue wait.

1. Idle server, 1,000 and 10,000 executors: time against the physical bound (the start latency
   plus N at the rate of as-fast-as-possible creates over 4 connections, measured in this run).
2. Capped server, 10,000: time against the cap's bound (start latency + N / 250), the sustained
   create rate against the cap, the 429 share of creates.
3. Changing capacity: other tenants take half the seats for a minute in the middle of a scale-up;
   how long the client's allowed rate and its achieved create rate take to follow, both ways.
4. Ten drivers, one capped server, 1,000 each at once: total time against the cap's bound for
   10,000, Jain's index of their throughputs, the 429 share of all calls, the slowest driver
   against the median.

Every figure is printed as a ratio to its bound; the table goes to `<out>/congestion-bench.md`, the
plots to `<out>/congestion-*.png`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from execpods.devtools.bench.congestion_run import (
    ADAPTIVE,
    BENCH_APF,
    SPARK,
    STATIC,
    Driver,
    Policy,
    Running,
    create_calls,
    create_rate,
    flow_calls,
    jain,
    kubesim,
    scale,
    sidecars,
    sustained_rate,
)
from execpods.kubesim import KubeSim
from execpods.kubesim.apf import ApfConfig
from matplotlib.figure import Figure

START = 1.0
CAPPED = BENCH_APF


@dataclass(frozen=True, slots=True, kw_only=True)
class Size:
    idle: tuple[int, ...]
    capped: int
    changing: int
    change_at: float
    """When other tenants take half the seats (seconds into the scale-up)..."""
    change_for: float
    """...and for how long."""
    drivers: int
    each: int


SIZES = {
    "full": Size(
        idle=(1_000, 10_000),
        capped=10_000,
        changing=12_000,
        change_at=10.0,
        change_for=60.0,
        drivers=10,
        each=1_000,
    ),
    "small": Size(
        idle=(300, 1_000),
        capped=1_000,
        changing=3_000,
        change_at=3.0,
        change_for=6.0,
        drivers=4,
        each=200,
    ),
}
SPARK_LIMIT = 2_000
"""Spark's 20 creates a second is run only up to this many executors (10,000 would be ~9 min)."""


@dataclass(slots=True, kw_only=True)
class Result:
    """One policy in one scenario: the figures and their bounds."""

    scenario: str
    policy: str
    executors: int
    seconds: float | None
    bound: float
    create_rate: float | None = None
    cap: float | None = None
    calls: int = 0
    throttled: int = 0
    fairness: float | None = None
    worst_to_median: float | None = None
    follow: tuple[float | None, float | None] | None = None
    curve: list[tuple[float, float, float, float]] = field(default_factory=list)
    """(seconds, executors running, allowed rate, server capacity)."""
    driver_seconds: list[float | None] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        return None if self.seconds is None else self.seconds / self.bound

    @property
    def share_429(self) -> float:
        return self.throttled / self.calls if self.calls else 0.0


Sample = tuple[float, float, float, float]


def _sampler(
    sim: KubeSim, drivers: Sequence[Driver], running: Running, curve: list[Sample]
) -> Callable[[float], None]:
    def tick(seconds: float) -> None:
        count = sum(running.count(d.app_id) for d in drivers)
        rates = [d.allowed_rate() or 0.0 for d in drivers]
        capacity = sim.apf.capacity() if sim.apf.enabled else 0.0
        curve.append((seconds, float(count), sum(rates), capacity))

    return tick


def _one(
    scenario: str,
    policy: Policy,
    executors: int,
    *,
    bound: float,
    apf: ApfConfig | None,
    timeout: float,
) -> Result:
    curve: list[Sample] = []
    with kubesim(executors, start_latency=START, apf=apf) as (sim, running):
        with sidecars(sim, ["bench"], policy) as drivers:
            tick = _sampler(sim, drivers, running, curve)
            scale(drivers, running, executors, timeout=timeout, tick=tick)
        creates, throttled = create_calls(sim)
        rate = sustained_rate(sim)
    return Result(
        scenario=scenario,
        policy=policy.name,
        executors=executors,
        seconds=drivers[0].seconds,
        bound=bound,
        create_rate=rate,
        cap=apf.capacity if apf is not None else None,
        calls=creates,
        throttled=throttled,
        curve=curve,
    )


def idle(size: str) -> list[Result]:
    results = []
    for executors in SIZES[size].idle:
        with kubesim(min(executors, 3_000), start_latency=START) as (sim, _):
            rate = create_rate(sim, min(executors, 3_000))
        bound = START + executors / rate
        print(f"idle {executors:,}: physical bound {bound:.1f} s ({rate:.0f} creates/s)")
        for policy in (STATIC, ADAPTIVE, SPARK):
            if policy is SPARK and executors > SPARK_LIMIT:
                continue
            result = _one("1 idle", policy, executors, bound=bound, apf=None, timeout=1200)
            results.append(_printed(result))
    return results


def capped(size: str) -> list[Result]:
    executors = SIZES[size].capped
    bound = START + executors / CAPPED.capacity
    return [
        _printed(_one("2 capped", policy, executors, bound=bound, apf=CAPPED, timeout=1200))
        for policy in (STATIC, ADAPTIVE)
    ]


def changing(size: str) -> list[Result]:
    executors = SIZES[size].changing
    at, span = SIZES[size].change_at, SIZES[size].change_for
    loaded = CAPPED.capacity / 2
    # Work: `at` seconds at the cap, `span` at half, the rest at the cap again.
    rest = max(0.0, executors - CAPPED.capacity * at - loaded * span)
    bound = START + at + span + rest / CAPPED.capacity
    results = []
    for policy in (STATIC, ADAPTIVE):
        curve: list[Sample] = []
        with kubesim(executors, start_latency=START, apf=CAPPED) as (sim, running):
            # More than the default maxTotal (10,000): the scale-up outlasts the minute.
            extra = {"execpods.allocation.maxTotal": str(2 * executors)}
            with sidecars(sim, ["bench"], policy, extra) as drivers:
                tick = _tenants(sim, _sampler(sim, drivers, running, curve), at, span)

                scale(drivers, running, executors, timeout=1200, tick=tick)
            creates, throttled = create_calls(sim)
        result = Result(
            scenario="3 changing",
            policy=policy.name,
            executors=executors,
            seconds=drivers[0].seconds,
            bound=bound,
            cap=CAPPED.capacity,
            calls=creates,
            throttled=throttled,
            curve=curve,
        )
        result.follow = (_follow(curve, at, down=True), _follow(curve, at + span, down=False))
        results.append(_printed(result))
    return results


def _tenants(
    sim: KubeSim, sample: Callable[[float], None], at: float, span: float
) -> Callable[[float], None]:
    """A tick that gives other tenants half the seats from `at` for `span` seconds, at runtime."""

    def tick(seconds: float) -> None:
        share = 0.5 if at <= seconds < at + span else 0.0
        if sim.apf.config.other_share != share:
            sim.configure_apf(dataclasses.replace(CAPPED, other_share=share))
        sample(seconds)

    return tick


def _follow(curve: Sequence[Sample], change: float, *, down: bool) -> float | None:
    """Seconds after `change` until the allowed rate is within 25% of the server's capacity."""
    for seconds, _, allowed, capacity in curve:
        if seconds < change or capacity <= 0:
            continue
        near = allowed <= 1.25 * capacity if down else allowed >= 0.75 * capacity
        if near:
            return seconds - change
    return None


def drivers(size: str) -> list[Result]:
    count, each = SIZES[size].drivers, SIZES[size].each
    apps = [f"driver-{i}" for i in range(count)]
    bound = START + count * each / CAPPED.capacity
    results = []
    for policy in (STATIC, ADAPTIVE, SPARK):
        with kubesim(count * each, start_latency=START, apf=CAPPED) as (sim, running):
            with sidecars(sim, apps, policy) as started:
                scale(started, running, each, timeout=1200)
            calls = [flow_calls(sim, app) for app in apps]
        times = [d.seconds for d in started]
        done = [t for t in times if t is not None]
        result = Result(
            scenario="4 ten drivers" if count == 10 else f"4 {count} drivers",
            policy=policy.name,
            executors=count * each,
            seconds=max(done) if len(done) == count else None,
            bound=bound,
            calls=sum(c for c, _ in calls),
            throttled=sum(t for _, t in calls),
            fairness=jain([each / t for t in done]) if len(done) == count else None,
            worst_to_median=max(done) / statistics.median(done) if done else None,
            driver_seconds=times,
        )
        results.append(_printed(result))
    return results


def _fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _printed(result: Result) -> Result:
    print(
        f"{result.scenario} | {result.policy} | {result.executors:,}: "
        f"{_fmt(result.seconds, ' s')} (bound {result.bound:.1f} s, "
        f"{_fmt(result.ratio, 'x', 2)}), 429s {result.share_429:.1%} of {result.calls:,}",
        flush=True,
    )
    return result


def report(results: Sequence[Result]) -> str:
    lines = [
        "| scenario | policy | executors | time | bound | time / bound | create rate / cap | "
        "429 share | Jain | slowest / median | follow down, up |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        rate = "-"
        if r.create_rate is not None and r.cap is not None:
            rate = f"{r.create_rate:.0f}/s = {r.create_rate / r.cap:.2f}x"
        elif r.create_rate is not None:
            rate = f"{r.create_rate:.0f}/s"
        follow = "-"
        if r.follow is not None:
            follow = f"{_fmt(r.follow[0], ' s')}, {_fmt(r.follow[1], ' s')}"
        lines.append(
            f"| {r.scenario} | {r.policy} | {r.executors:,} | {_fmt(r.seconds, ' s')} | "
            f"{r.bound:.1f} s | {_fmt(r.ratio, 'x', 2)} | {rate} | {r.share_429:.1%} | "
            f"{_fmt(r.fairness, '', 3)} | {_fmt(r.worst_to_median, 'x', 2)} | {follow} |"
        )
    return "\n".join(lines)


def plot(results: Sequence[Result], out: Path) -> list[Path]:
    """Executors over time (scenarios 1-2), rates over time (3), times per driver (4)."""
    written = []
    curves = [r for r in results if r.curve and not r.scenario.startswith("3")]
    if curves:
        keys = sorted({(r.scenario, r.executors) for r in curves})
        figure = Figure(figsize=(5 * len(keys), 4))
        axes = figure.subplots(1, len(keys), squeeze=False)[0]
        for axis, (scenario, executors) in zip(axes, keys, strict=True):
            for r in (x for x in curves if (x.scenario, x.executors) == (scenario, executors)):
                axis.plot([c[0] for c in r.curve], [c[1] for c in r.curve], label=r.policy)
                axis.axvline(r.bound, color="grey", linestyle="--")
            axis.set_title(f"{scenario}: {executors:,} executors")
            axis.set_xlabel("seconds (grey: bound)")
            axis.set_ylabel("executors Running")
            axis.legend(fontsize=8)
            axis.grid(True, alpha=0.3)
        written.append(_save(figure, out / "congestion-scaleup.png"))
    changes = [r for r in results if r.scenario.startswith("3")]
    if changes:
        figure = Figure(figsize=(6 * len(changes), 4))
        axes = figure.subplots(1, len(changes), squeeze=False)[0]
        for axis, r in zip(axes, changes, strict=True):
            xs = [c[0] for c in r.curve]
            axis.plot(xs, [c[3] for c in r.curve], label="server capacity (calls/s)")
            axis.plot(xs, [c[2] for c in r.curve], label="client's allowed rate (calls/s)")
            achieved = [
                (b1 - b0) / (t1 - t0)
                for (t0, b0, *_), (t1, b1, *_) in zip(r.curve, r.curve[4:], strict=False)
            ]
            axis.plot(xs[4 : 4 + len(achieved)], achieved, label="executors started/s")
            axis.set_ylim(0, max(600.0, *(c[2] for c in r.curve)) * 1.05)
            axis.set_title(f"3 changing capacity: {r.policy}")
            axis.set_xlabel("seconds")
            axis.legend(fontsize=8)
            axis.grid(True, alpha=0.3)
        written.append(_save(figure, out / "congestion-capacity.png"))
    fleets = [r for r in results if r.driver_seconds]
    if fleets:
        figure = Figure(figsize=(6, 4))
        axis = figure.subplots()
        width = 0.8 / len(fleets)
        for i, r in enumerate(fleets):
            xs = [j + i * width for j in range(len(r.driver_seconds))]
            axis.bar(xs, [t or 0.0 for t in r.driver_seconds], width, label=r.policy)
        axis.axhline(fleets[0].bound, color="grey", linestyle="--", label="cap's bound")
        axis.set_xlabel("driver")
        axis.set_ylabel("seconds to its executors Running")
        axis.set_title(f"4 drivers sharing one capped server ({fleets[0].executors:,} in all)")
        axis.legend(fontsize=8)
        written.append(_save(figure, out / "congestion-drivers.png"))
    return written


def _save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


SCENARIOS = {"1": idle, "2": capped, "3": changing, "4": drivers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--scenarios", default="1,2,3,4", help="which scenarios (1,2,3,4)")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where table and PNGs go")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    started = time.monotonic()
    results: list[Result] = []
    for name in [s.strip() for s in args.scenarios.split(",") if s.strip()]:
        results.extend(SCENARIOS[name](args.size))
    table = report(results)
    print()
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "congestion-bench.md").write_text(table + "\n", encoding="utf-8")
    for path in plot(results, args.out):
        print(f"wrote {path}")
    print(f"{time.monotonic() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
