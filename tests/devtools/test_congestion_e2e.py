"""Congestion control end to end: real sidecar processes over HTTP on a kubesim with APF, and on
one with a hard create cap (429 + Retry-After beyond 100 creates a second).

The benchmarks' capped-server rows (`congestion.py` scenarios 2 and 4, `servers.py`'s `apf` and
`cap` models) at a small size. The bounds are looser than the benchmark's goals
(docs/benchmarks.md), so they hold on a loaded 2-core machine: what they prove is that the
controller keeps 429s rare and shares the server fairly, not how fast this machine is.
"""

from __future__ import annotations

import statistics

import pytest
from execpods.devtools.bench.congestion_run import (
    ADAPTIVE,
    create_calls,
    flow_calls,
    jain,
    kubesim,
    scale,
    sidecars,
)
from execpods.kubesim.apf import ApfConfig

START = 0.2
# 4 seats of 20-40 ms: about 100 calls a second when full; a flow may queue 8 requests.
CAPPED = ApfConfig(seats=4, service_time=0.02, slowdown=1.0, queue_length=8, max_wait=2.0)


@pytest.mark.slow
def test_one_driver_on_a_capped_server_gets_few_429s_and_the_servers_rate() -> None:
    executors = 300
    with kubesim(executors, start_latency=START, apf=CAPPED) as (sim, running):
        with sidecars(sim, ["capped"], ADAPTIVE) as drivers:
            scale(drivers, running, executors, timeout=45)
        creates, throttled = create_calls(sim)
    seconds = drivers[0].seconds
    assert seconds is not None, f"{running.count('capped')} of {executors} running"
    assert throttled / creates < 0.10, f"{throttled} of {creates} creates answered 429"
    bound = START + executors / CAPPED.capacity
    assert seconds < 3.0 * bound, f"{seconds:.1f} s against the cap's bound {bound:.1f} s"


@pytest.mark.slow
def test_drivers_sharing_a_capped_server_converge_to_fair_shares() -> None:
    apps = [f"fair-{i}" for i in range(4)]
    each = 100
    with kubesim(each * len(apps), start_latency=START, apf=CAPPED) as (sim, running):
        with sidecars(sim, apps, ADAPTIVE) as drivers:
            scale(drivers, running, each, timeout=50)
        calls = [flow_calls(sim, app) for app in apps]
    times = [d.seconds for d in drivers]
    assert all(t is not None for t in times), [running.count(a) for a in apps]
    seconds = [t for t in times if t is not None]
    fairness = jain([each / t for t in seconds])
    assert fairness >= 0.8, f"Jain's index {fairness:.2f} of times {seconds}"
    median = statistics.median(seconds)
    assert max(seconds) <= 2.0 * median, f"a driver starved: {seconds}"
    total, throttled = sum(c for c, _ in calls), sum(t for _, t in calls)
    assert throttled / total < 0.10, f"{throttled} of {total} calls answered 429"


CAP = 100.0
"""Creates a second kubesim admits; beyond it 429 with a Retry-After (a gateway, a webhook)."""


@pytest.mark.slow
def test_drivers_on_a_hard_cap_share_it_with_few_429s() -> None:
    # The refused create waits its Retry-After while the others go on, and a 429 cuts the rate to
    # just under what the server delivered: on 128638e a 429 held every call for its Retry-After
    # and halved the rate, and two drivers finished 1.5x apart at 1.5x the cap's bound.
    apps = ["cap-0", "cap-1"]
    each = 150
    with kubesim(each * len(apps), start_latency=START, create_rate=CAP) as (sim, running):
        with sidecars(sim, apps, ADAPTIVE) as drivers:
            scale(drivers, running, each, timeout=60)
        creates, throttled = create_calls(sim)
    times = [d.seconds for d in drivers]
    assert all(t is not None for t in times), [running.count(a) for a in apps]
    seconds = [t for t in times if t is not None]
    assert throttled / creates < 0.10, f"{throttled} of {creates} creates answered 429"
    # 1.6x failed about one run in four on main (1.84 s against 3.08 s: Jain 0.94 of the rates,
    # the slower driver at the cap's bound): the unfairness the benchmark's 10-application rows
    # show, smaller. What this test guards is that neither driver is starved.
    fairness = jain([each / t for t in seconds])
    assert fairness >= 0.8, f"Jain's index {fairness:.2f} of times {seconds}"
    assert max(seconds) <= 2.0 * min(seconds), f"one driver starved: {seconds}"
    bound = START + each * len(apps) / CAP
    assert max(seconds) < 3.0 * bound, f"{seconds} against the cap's bound {bound:.1f} s"
