"""The create-rate cap (429 + Retry-After, as API Priority and Fairness answers) and the
start-latency distributions, through the official client, the control endpoint and the CLI."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.kubesim.cli import main as cli_main
from execpods.kubesim.clock import VirtualClock
from execpods.kubesim.errors import ApiError
from execpods.kubesim.limits import DISTRIBUTIONS, CreateRateLimit, sample_latency
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import NS, core_for, pod_body
from tests.kubesim.support import http_json, raw, status_of
from tests.kubesim.test_control import cli


def _retry_after(exc: ApiException) -> str:
    headers = exc.headers
    assert headers is not None
    value: str = headers["Retry-After"]
    return value


def _capped(rate: float, burst: int = 0) -> KubeSim:
    cfg = ClusterConfig(create_rate=rate, create_burst=burst, seed=1)
    return KubeSim(cluster=cfg, deterministic=True)


def test_creates_beyond_the_cap_get_429_with_retry_after_and_a_status() -> None:
    with _capped(2.0, burst=3) as sim, core_for(sim) as core:
        for i in range(3):
            core.create_namespaced_pod(NS, pod_body(f"p{i}"))
        with pytest.raises(ApiException) as exc:
            core.create_namespaced_pod(NS, pod_body("refused"))
        assert exc.value.status == 429
        assert _retry_after(exc.value) == "1"
        status = status_of(exc.value)
        assert (status["kind"], status["reason"], status["code"]) == (
            "Status",
            "TooManyRequests",
            429,
        )
        assert status["details"]["retryAfterSeconds"] == 1
        assert sim.pod("refused") is None  # a refused create stores nothing
        # Reads are not creates: the cap leaves them alone.
        assert len(core.list_namespaced_pod(NS).items) == 3
        sim.advance(0.5)  # one token at 2/s
        core.create_namespaced_pod(NS, pod_body("after-refill"))
        with pytest.raises(ApiException):
            core.create_namespaced_pod(NS, pod_body("refused-again"))
        assert [r.status for r in sim.requests() if r.verb == "create"] == [201] * 3 + [
            429,
            201,
            429,
        ]
        assert sim.state()["createRate"] == {"perSecond": 2.0, "burst": 3, "rejected": 2}


def test_retry_after_rounds_the_wait_for_a_token_up_to_whole_seconds() -> None:
    with _capped(0.25) as sim, core_for(sim) as core:
        core.create_namespaced_pod(NS, pod_body("first"))  # burst defaults to 1 below 1/s
        with pytest.raises(ApiException) as exc:
            core.create_namespaced_pod(NS, pod_body("second"))
        assert _retry_after(exc.value) == "4"
        sim.advance(3.9)
        with pytest.raises(ApiException):
            core.create_namespaced_pod(NS, pod_body("second"))
        sim.advance(0.1)  # waiting exactly Retry-After is enough
        core.create_namespaced_pod(NS, pod_body("second"))


def test_in_process_creates_are_set_up_not_api_traffic() -> None:
    with _capped(1.0) as sim:
        for i in range(5):
            sim.create_pod(pod_body(f"p{i}"))
        assert len(sim.pods()) == 5
        code, _ = raw(sim, "POST", f"/api/v1/namespaces/{NS}/pods", pod_body("api"))
        assert code == 201  # the bucket is still full


def _take(limit: CreateRateLimit) -> ApiError | None:
    """Take a token; the refusal if there was none."""
    try:
        limit.take()
    except ApiError as err:
        return err
    return None


@settings(max_examples=60, deadline=None)
@given(
    rate=st.one_of(
        st.floats(min_value=0.1, max_value=1.0), st.floats(min_value=1.0, max_value=50.0)
    ),
    burst=st.integers(min_value=0, max_value=20),
    steps=st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=2.0), st.integers(min_value=0, max_value=10)),
        min_size=1,
        max_size=20,
    ),
)
@example(rate=0.3, burst=0, steps=[(0.0, 2)])  # a wait of 3.33 s must be announced as 4
@example(rate=7.0, burst=3, steps=[(0.0, 5), (0.1, 4)])
def test_the_cap_is_never_exceeded_and_retry_after_is_honest(
    rate: float, burst: int, steps: list[tuple[float, int]]
) -> None:
    """Over any window, admitted creates <= burst + rate * window; and a client that waits the
    Retry-After it was given finds a token."""
    clock = VirtualClock()
    limit = CreateRateLimit(clock, rate, burst)
    admitted: list[float] = []
    for gap, attempts in steps:
        clock.advance(gap)
        for _ in range(attempts):
            refusal = _take(limit)
            if refusal is not None:
                assert (refusal.code, refusal.reason) == (429, "TooManyRequests")
                assert refusal.retry_after is not None
                assert refusal.retry_after >= 1
                clock.advance(refusal.retry_after)
                limit.take()  # raises if the advertised wait was too short
            admitted.append(clock.now())
    for i, start in enumerate(admitted):
        for j in range(i, len(admitted)):
            window = admitted[j] - start
            assert j - i + 1 <= limit.burst + rate * window + 1e-6


def test_latency_distributions_are_seeded_bounded_and_shaped() -> None:
    def draws(kind: str, seed: int = 3) -> list[float]:
        rng = random.Random(seed)
        return [sample_latency(rng, kind, 1.0, 0.5) for _ in range(20_000)]

    for kind in DISTRIBUTIONS:
        assert draws(kind) == draws(kind)  # seeded: the same run every time
        assert min(draws(kind)) >= 0.0
    uniform = draws("uniform")
    assert 0.5 <= min(uniform) < 0.51
    assert 1.49 < max(uniform) <= 1.5
    assert set(draws("fixed")) == {1.0}
    for kind in ("normal", "lognormal"):
        sample = draws(kind)
        assert statistics.fmean(sample) == pytest.approx(1.0, abs=0.02)
        assert statistics.stdev(sample) == pytest.approx(0.5, abs=0.03)
    lognormal = draws("lognormal")
    assert statistics.median(lognormal) < statistics.fmean(lognormal)  # the long right tail
    assert draws("uniform", 3) != draws("uniform", 4)


def _running_at(sim: KubeSim, name: str) -> float:
    """The virtual time at which the pod turned Running (stepping the clock)."""
    while (pod := sim.pod(name)) is not None and pod["status"]["phase"] != "Running":
        assert sim.step(), "the pod never started"
    return sim.now()


def test_start_latency_follows_the_configured_distribution_end_to_end() -> None:
    cfg = ClusterConfig(start_latency=2.0, start_distribution="fixed", seed=1)
    with KubeSim(cluster=cfg, deterministic=True) as sim:
        t0 = sim.now()
        sim.create_pod(pod_body("fixed"))
        assert _running_at(sim, "fixed") - t0 == pytest.approx(2.0)
        sim.set_start_latency(0.5, distribution="fixed")
        t1 = sim.now()
        sim.create_pod(pod_body("faster"))
        assert _running_at(sim, "faster") - t1 == pytest.approx(0.5)


def test_runs_with_the_same_seed_start_pods_at_the_same_times() -> None:
    def start_times(seed: int) -> list[float]:
        cfg = ClusterConfig(
            start_latency=1.0, start_jitter=0.5, start_distribution="lognormal", seed=seed
        )
        with KubeSim(cluster=cfg, deterministic=True) as sim:
            for i in range(20):
                sim.create_pod(pod_body(f"p{i}"))
            return [_running_at(sim, f"p{i}") for i in range(20)]

    assert start_times(5) == start_times(5)
    assert start_times(5) != start_times(6)


def test_control_endpoint_sets_the_cap_and_the_latency(sim: KubeSim) -> None:
    code, _ = raw(sim, "POST", "/_kubesim/config/create-rate", {"perSecond": 1, "burst": 2})
    assert code == 200
    codes = [
        raw(sim, "POST", f"/api/v1/namespaces/{NS}/pods", pod_body(f"p{i}"))[0] for i in range(3)
    ]
    assert codes == [201, 201, 429]
    code, _ = raw(
        sim, "POST", "/_kubesim/config/start-latency", {"mean": 3, "distribution": "fixed"}
    )
    assert code == 200
    state = raw(sim, "GET", "/_kubesim/state")[1]
    assert state["startLatency"] == {"mean": 3.0, "spread": 0.0, "distribution": "fixed"}
    assert state["createRate"]["perSecond"] == 1.0
    raw(sim, "POST", "/_kubesim/config/create-rate", {"perSecond": 0})
    assert raw(sim, "POST", f"/api/v1/namespaces/{NS}/pods", pod_body("free"))[0] == 201
    t0 = sim.now()
    assert _running_at(sim, "free") - t0 == pytest.approx(3.0)
    code, err = raw(sim, "POST", "/_kubesim/config/start-latency", {"distribution": "pareto"})
    assert (code, err["reason"]) == (400, "BadRequest")
    assert "pareto" in err["message"]
    code, err = raw(sim, "POST", "/_kubesim/config/create-rate", {"perSecond": -1})
    assert code == 400


def test_config_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="distribution"):
        ClusterConfig(start_distribution="pareto")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mean"):
        ClusterConfig(start_latency=-1.0)
    with pytest.raises(ValueError, match="create_rate"):
        ClusterConfig(create_rate=-2.0)


def test_cli_takes_the_cap_and_the_distribution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--create-rate", "1", "--create-burst", "1", "--start-distribution", "fixed"]
    with cli(tmp_path / "kc.yaml", *flags, "--start-latency", "2", "--deterministic") as (
        proc,
        url,
    ):
        port = int(url.rsplit(":", 1)[1])
        path = f"/api/v1/namespaces/{NS}/pods"
        first = http_json("127.0.0.1", port, "POST", path, pod_body("a"))[0]
        second = http_json("127.0.0.1", port, "POST", path, pod_body("b"))[0]
        assert (first, second) == (201, 429)
        state = http_json("127.0.0.1", port, "GET", "/_kubesim/state")[1]
        assert state["startLatency"]["distribution"] == "fixed"
        proc.terminate()
        assert proc.wait(timeout=20) == 0
    with pytest.raises(SystemExit):
        cli_main(["--create-rate", "-1"])
    assert "create_rate" in capsys.readouterr().err


def test_the_request_log_measures_the_peak_request_rate(sim: KubeSim) -> None:
    """Each request is stamped with the simulator's clock, so a benchmark or a fault test can
    check that a client never exceeded its rate limit."""
    path = f"/api/v1/namespaces/{NS}/pods"
    for i in range(3):
        raw(sim, "POST", path, pod_body(f"a{i}"))
    sim.advance(0.5)
    raw(sim, "GET", path)
    sim.advance(2.0)
    raw(sim, "POST", path, pod_body("b"))
    assert [r.at - sim.requests()[0].at for r in sim.requests()] == [0, 0, 0, 0.5, 2.5]
    assert sim.peak_request_rate() == 4.0
    assert sim.peak_request_rate(verbs=["create"]) == 3.0
    assert sim.peak_request_rate(window=5.0) == 1.0
    code, body = raw(sim, "POST", "/_kubesim/requests/peak-rate", {"verbs": "list,get"})
    assert (code, body["perSecond"]) == (200, 1.0)
    assert raw(sim, "GET", "/_kubesim/requests/peak-rate")[1]["perSecond"] == 4.0
    sim.clear_requests()
    assert sim.peak_request_rate() == 0.0
