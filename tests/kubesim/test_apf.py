"""API Priority and Fairness in kubesim: seats, per-flow queues, fair dispatch, bounded waits,
429 + Retry-After, latency that grows as seats fill, and other tenants' share.

The model's rules are checked deterministically on `FairQueues` with a fake clock and sleep; the
HTTP behaviour (who a flow is, the 429's header and Status, watches exempt, the control routes)
over real HTTP with the official client.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator

import orjson
import pytest
from execpods.kubesim import KubeSim
from execpods.kubesim.apf import ApfConfig, FairQueues

from tests.kubesim.conftest import NS, pod_body
from tests.kubesim.support import eventually, raw


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def queues(time: FakeTime, **config: object) -> FairQueues:
    return FairQueues(ApfConfig(**config), clock=time.clock, sleep=time.sleep)  # type: ignore[arg-type]


def test_off_without_seats() -> None:
    time = FakeTime()
    apf = queues(time)
    with apf.seat("a") as waited:
        assert waited == 0.0
    assert time.slept == []


def test_service_time_grows_as_seats_fill() -> None:
    time = FakeTime()
    apf = queues(time, seats=4, service_time=0.1, slowdown=1.0)
    with apf.seat("a"), apf.seat("b"), apf.seat("c"), apf.seat("d"):
        pass
    # 1, 2, 3 then 4 of 4 seats in use: 0.1 x (1 + share in use)
    assert time.slept == pytest.approx([0.125, 0.15, 0.175, 0.2])


def test_other_tenants_take_their_share_of_the_seats() -> None:
    time = FakeTime()
    apf = queues(time, seats=10, service_time=0.02, slowdown=1.0, other_share=0.5)
    assert apf.free_seats() == 5
    assert apf.capacity() == pytest.approx(5 / 0.04)
    apf.configure(ApfConfig(seats=10, service_time=0.02, slowdown=1.0))
    assert apf.capacity() == pytest.approx(250.0)


def test_other_tenants_share_varies_by_schedule() -> None:
    time = FakeTime()
    apf = queues(time, seats=10, schedule=((10.0, 0.0), (5.0, 0.5)))
    seen = []
    for at in (0.0, 9.9, 10.0, 14.9, 15.0, 26.0):
        time.now = at
        seen.append(apf.free_seats())
    assert seen == [10, 10, 5, 5, 10, 5]


def test_never_all_seats_to_other_tenants() -> None:
    apf = queues(FakeTime(), seats=2, other_share=0.9)
    assert apf.free_seats() == 1


@pytest.mark.parametrize(
    "config",
    [
        {"seats": -1},
        {"service_time": -0.1},
        {"other_share": 1.0},
        {"retry_after": 0},
        {"schedule": ((0.0, 0.5),)},
    ],
)
def test_bad_settings_are_refused(config: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"."):
        ApfConfig(**config)  # type: ignore[arg-type]


# Over real HTTP: threads hold seats for real (short) service times.


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim() as server:
        yield server


def request(
    sim: KubeSim, flow: str, path: str = f"/api/v1/namespaces/{NS}/pods", method: str = "GET"
) -> tuple[int, dict[str, str], object]:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=20)
    try:
        body = orjson.dumps(pod_body(generate_name="p-")) if method == "POST" else None
        headers = {"User-Agent": flow, "Content-Type": "application/json"}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, dict(response.getheaders()), orjson.loads(data) if data else None
    finally:
        conn.close()


def concurrently(count: int, call: object) -> list[tuple[int, dict[str, str], object]]:
    results: list[tuple[int, dict[str, str], object]] = []
    lock = threading.Lock()

    def run() -> None:
        answer = call()  # type: ignore[operator]
        with lock:
            results.append(answer)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_a_full_queue_answers_429_with_retry_after(sim: KubeSim) -> None:
    sim.configure_apf(ApfConfig(seats=1, service_time=0.5, queue_length=1, retry_after=2))
    results = concurrently(4, lambda: request(sim, "flood", method="POST"))
    codes = sorted(code for code, _, _ in results)
    assert codes.count(201) >= 2, codes
    assert codes.count(429) >= 1, codes
    rejected = next(r for r in results if r[0] == 429)
    assert rejected[1]["Retry-After"] == "2"
    status = rejected[2]
    assert isinstance(status, dict)
    assert status["reason"] == "TooManyRequests"
    assert status["details"]["retryAfterSeconds"] == 2
    flows = sim.apf.state()["flows"]
    assert isinstance(flows, dict)
    assert flows["flood"]["rejected"] >= 1


def test_a_request_that_waits_too_long_is_rejected(sim: KubeSim) -> None:
    sim.configure_apf(ApfConfig(seats=1, service_time=0.6, max_wait=0.1))
    results = concurrently(2, lambda: request(sim, "slow"))
    assert sorted(code for code, _, _ in results) == [200, 429]


def test_a_light_flow_is_served_ahead_of_a_heavy_flows_queue(sim: KubeSim) -> None:
    """Fair queuing: the flood's queue is the flood's problem."""
    sim.configure_apf(ApfConfig(seats=1, service_time=0.1, slowdown=0.0, queue_length=50))
    flood = threading.Thread(target=lambda: concurrently(8, lambda: request(sim, "heavy")))
    flood.start()
    try:
        assert eventually(lambda: _queued(sim, "heavy") >= 5)
        light = concurrently(1, lambda: request(sim, "light"))
        assert light[0][0] == 200
        # Served as soon as the seat was free, ahead of the heavy flow's queued requests.
        assert _queued(sim, "heavy") >= 3
    finally:
        flood.join(30)


def test_flows_are_told_apart_by_token_before_user_agent(sim: KubeSim) -> None:
    sim.configure_apf(ApfConfig(seats=1, service_time=0.01))
    request(sim, "same-agent")
    code, _ = raw(sim, "GET", f"/api/v1/namespaces/{NS}/pods", **{"Authorization": "Bearer t1"})
    assert code == 200
    flows = sim.apf.state()["flows"]
    assert isinstance(flows, dict)
    assert set(flows) == {"same-agent", "Bearer t1"}


def test_watches_hold_no_seat(sim: KubeSim) -> None:
    sim.configure_apf(ApfConfig(seats=1, service_time=0.01, max_wait=0.5))
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    try:
        conn.request("GET", f"/api/v1/namespaces/{NS}/pods?watch=true&timeoutSeconds=5")
        assert conn.getresponse().status == 200  # streaming
        assert request(sim, "other")[0] == 200  # the watch left the only seat free
    finally:
        conn.close()


def test_the_control_routes_set_and_show_apf(sim: KubeSim) -> None:
    code, body = raw(sim, "POST", "/_kubesim/config/apf", {"seats": 10, "otherTenants": 0.5})
    assert code == 200
    assert body["apf"]["freeSeats"] == 5
    code, body = raw(sim, "POST", "/_kubesim/config/apf", {"otherTenants": 0.0})
    assert body["apf"]["freeSeats"] == 10
    assert body["apf"]["seats"] == 10
    code, body = raw(sim, "POST", "/_kubesim/config/apf", {"seats": "many"})
    assert code == 400
    code, body = raw(sim, "POST", "/_kubesim/config/apf", {"nope": 1})
    assert code == 400
    code, body = raw(sim, "GET", "/_kubesim/apf")
    assert code == 200
    assert body["seats"] == 10


def _queued(sim: KubeSim, flow: str) -> int:
    flows = sim.apf.state()["flows"]
    assert isinstance(flows, dict)
    state = flows.get(flow, {})
    return int(state.get("queued", 0))
