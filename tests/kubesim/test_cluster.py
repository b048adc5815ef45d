"""The simulated cluster, observed through the official client: scheduling, the kubelet, failures.

Deterministic mode throughout: the tests move the virtual clock instead of waiting.
"""

from __future__ import annotations

from typing import Any

from execpods.kubesim import ANNOTATION_PREFIX, ClusterConfig, KubeSim

from tests.kubesim.conftest import NS, CoreApi, core_for, open_watch, pod_body, read_events


def phase(core: CoreApi, name: str) -> str:
    result: str = core.read_namespaced_pod(name, NS).status.phase
    return result


def terminated(core: CoreApi, name: str) -> Any:
    return core.read_namespaced_pod(name, NS).status.container_statuses[0].state.terminated


def reached_at(sim: KubeSim, phase_name: str) -> dict[str, float]:
    """Run every cluster action, one at a time; when each pod first reached ``phase_name``."""
    t0 = sim.now()
    times: dict[str, float] = {}
    while sim.step():
        for pod in sim.pods():
            if pod["status"]["phase"] == phase_name:
                times.setdefault(pod["metadata"]["name"], sim.now() - t0)
    return times


def test_nothing_happens_until_the_clock_moves(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("p"))
    pod = core.read_namespaced_pod("p", NS)
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"
    assert sim.step()  # the scheduler binds
    assert core.read_namespaced_pod("p", NS).spec.node_name
    assert phase(core, "p") == "Pending"
    sim.advance(0.49)  # start latency is 1.0 +/- 0.5
    assert phase(core, "p") == "Pending"
    sim.advance(1.02)
    pod = core.read_namespaced_pod("p", NS)
    assert pod.status.phase == "Running"
    assert pod.status.container_statuses[0].state.running.started_at is not None
    assert pod.status.pod_ip


def test_start_latency_is_seeded_and_reproducible() -> None:
    def start_times(seed: int) -> list[float]:
        cfg = ClusterConfig(
            nodes=1, pods_per_node=10, start_latency=2.0, start_jitter=1.0, seed=seed
        )
        with KubeSim(cluster=cfg, deterministic=True) as s:
            for i in range(5):
                s.create_pod(pod_body(f"p{i}"))
            times = reached_at(s, "Running")
            return [times[f"p{i}"] for i in range(5)]

    first, again, other = start_times(1), start_times(1), start_times(2)
    assert first == again
    assert first != other
    assert all(1.0 <= t <= 3.0 for t in first)
    assert len(set(first)) > 1


def test_capacity_leaves_pods_unschedulable_until_space_frees(sim: KubeSim, core: CoreApi) -> None:
    for i in range(7):  # 2 nodes x 3
        core.create_namespaced_pod(NS, pod_body(f"p{i}"))
    sim.run_until_idle()
    pod = core.read_namespaced_pod("p6", NS)
    assert pod.status.phase == "Pending"
    cond = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert sorted(n.pods for n in sim.nodes()) == [3, 3]
    core.delete_namespaced_pod("p0", NS)
    sim.run_until_idle()
    pod = core.read_namespaced_pod("p6", NS)
    assert pod.status.phase == "Running"
    cond = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert cond.status == "True"


def test_image_pull_failure() -> None:
    cfg = ClusterConfig(image_pull_failures=("broken:1",), seed=1)
    with KubeSim(cluster=cfg, deterministic=True) as s:
        s.create_pod(pod_body("bad", image="broken:1"))
        s.create_pod(
            pod_body("tagged", annotations={ANNOTATION_PREFIX + "image-pull-failure": "true"})
        )
        s.create_pod(pod_body("good"))
        s.advance(2.5)  # bound and started: the pulls fail
        for name in ("bad", "tagged"):
            pod = s.pod(name)
            assert pod is not None
            assert pod["status"]["phase"] == "Pending"
            waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
            assert waiting["reason"] in ("ErrImagePull", "ImagePullBackOff")
        good = s.pod("good")
        assert good is not None
        assert good["status"]["phase"] == "Running"


def waiting_of(sim: KubeSim, name: str) -> dict[str, str]:
    pod = sim.pod(name)
    assert pod is not None
    state = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    return {"reason": str(state.get("reason")), "message": str(state.get("message"))}


def test_image_pull_backs_off_as_the_kubelet_does() -> None:
    """ErrImagePull, then ImagePullBackOff with the kubelet's message while it backs off
    (10 s, doubling), then another pull; the kubelet's Failed and BackOff events."""
    cfg = ClusterConfig(image_pull_failures=("broken:1",), start_distribution="fixed")
    with KubeSim(cluster=cfg, deterministic=True) as s:
        s.create_pod(pod_body("bad", image="broken:1"))
        s.advance(1.0)  # scheduled at 0, the pull fails at start (1 s)
        assert waiting_of(s, "bad") == {
            "reason": "ErrImagePull",
            "message": 'failed to pull image "broken:1": not found',
        }
        s.advance(1.0)
        assert waiting_of(s, "bad") == {
            "reason": "ImagePullBackOff",
            "message": 'Back-off pulling image "broken:1": ErrImagePull: '
            'failed to pull image "broken:1": not found',
        }
        s.advance(9.0)  # the second pull, 10 s after the first
        assert waiting_of(s, "bad")["reason"] == "ErrImagePull"
        s.advance(1.0)
        assert waiting_of(s, "bad")["reason"] == "ImagePullBackOff"
        s.advance(18.5)  # 20 s after the second: not yet
        assert waiting_of(s, "bad")["reason"] == "ImagePullBackOff"
        s.advance(1.0)
        assert waiting_of(s, "bad")["reason"] == "ErrImagePull"
        reasons = [(e["reason"], e["type"], e["source"]["component"]) for e in s.objects("events")]
        assert reasons[:2] == [("Failed", "Warning", "kubelet"), ("BackOff", "Normal", "kubelet")]


def test_crash_after_a_time_with_exit_code(sim: KubeSim, core: CoreApi) -> None:
    ann = {ANNOTATION_PREFIX + "exit-after": "30", ANNOTATION_PREFIX + "exit-code": "3"}
    core.create_namespaced_pod(NS, pod_body("p", annotations=ann))
    sim.advance(10)
    assert phase(core, "p") == "Running"
    sim.advance(30)
    assert phase(core, "p") == "Failed"
    term = terminated(core, "p")
    assert (term.exit_code, term.reason) == (3, "Error")
    assert term.finished_at is not None


def test_oom_killed(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(
        NS, pod_body("a", annotations={ANNOTATION_PREFIX + "oom-after": "5"})
    )
    core.create_namespaced_pod(NS, pod_body("b"))
    sim.run_until_idle()
    sim.oom_kill("b")
    for name in ("a", "b"):
        assert phase(core, name) == "Failed"
        term = terminated(core, name)
        assert (term.exit_code, term.reason) == (137, "OOMKilled")


def test_eviction_and_node_loss(sim: KubeSim, core: CoreApi) -> None:
    for i in range(4):
        core.create_namespaced_pod(NS, pod_body(f"p{i}", restart_policy="Always"))
    sim.run_until_idle()
    evicted = sim.evict("p0")
    assert evicted["status"]["phase"] == "Failed"
    assert evicted["status"]["reason"] == "Evicted"
    node = core.read_namespaced_pod("p1", NS).spec.node_name
    on_node = {
        p.metadata.name for p in core.list_namespaced_pod(NS).items if p.spec.node_name == node
    }
    failed = {p["metadata"]["name"] for p in sim.lose_node(node)}
    assert failed == on_node - {"p0"}
    for name in failed:
        pod = core.read_namespaced_pod(name, NS)
        assert pod.status.phase == "Failed"
        assert pod.status.reason == "NodeLost"
    assert [n.ready for n in sim.nodes() if n.name == node] == [False]
    core.create_namespaced_pod(NS, pod_body("fresh"))
    sim.run_until_idle()
    assert core.read_namespaced_pod("fresh", NS).spec.node_name != node


def test_restart_policy_always_restarts_and_never_does_not(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("always", restart_policy="Always"))
    core.create_namespaced_pod(NS, pod_body("never", restart_policy="Never"))
    sim.run_until_idle()
    sim.fail_pod("always", exit_code=2)
    sim.fail_pod("never", exit_code=2)
    crashed = core.read_namespaced_pod("always", NS).status
    assert crashed.phase == "Running"
    assert crashed.container_statuses[0].state.waiting.reason == "CrashLoopBackOff"
    assert crashed.container_statuses[0].last_state.terminated.exit_code == 2
    assert phase(core, "never") == "Failed"
    sim.run_until_idle(max_seconds=60)
    restarted = core.read_namespaced_pod("always", NS).status.container_statuses[0]
    assert restarted.restart_count == 1
    assert restarted.state.running is not None


def test_seeded_random_failure_rate() -> None:
    cfg = ClusterConfig(nodes=1, pods_per_node=50, failure_rate=1.0, failure_after=5.0, seed=3)
    with KubeSim(cluster=cfg, deterministic=True) as s:
        for i in range(5):
            s.create_pod(pod_body(f"p{i}"))
        s.run_until_idle()
        pods = s.pods()
        assert {p["status"]["phase"] for p in pods} == {"Failed"}
        codes = {
            p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] for p in pods
        }
        assert codes == {1}
    cfg = ClusterConfig(nodes=1, pods_per_node=50, failure_rate=0.0, seed=3)
    with KubeSim(cluster=cfg, deterministic=True) as s:
        for i in range(5):
            s.create_pod(pod_body(f"p{i}"))
        s.run_until_idle()
        assert {p["status"]["phase"] for p in s.pods()} == {"Running"}


def test_seeded_random_failure_rate_is_reproducible() -> None:
    """A partial failure rate picks the same pods, at the same times, for the same seed."""

    def failures(seed: int) -> dict[str, float]:
        cfg = ClusterConfig(nodes=1, pods_per_node=50, failure_rate=0.5, seed=seed)
        with KubeSim(cluster=cfg, deterministic=True) as s:
            for i in range(20):
                s.create_pod(pod_body(f"p{i}"))
            failed_at = reached_at(s, "Failed")
            for pod in s.pods():
                if pod["metadata"]["name"] in failed_at:
                    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
                    assert (term["exitCode"], term["message"]) == (1, "random failure")
                else:
                    assert pod["status"]["phase"] == "Running"
            return failed_at

    first, again, other = failures(11), failures(11), failures(12)
    assert first == again
    assert first != other
    assert 0 < len(first) < 20  # about half, not all or none


def test_pause_and_resume_kubelet(sim: KubeSim, core: CoreApi) -> None:
    sim.pause_kubelet()
    core.create_namespaced_pod(NS, pod_body("p"))
    sim.run_until_idle()
    pod = core.read_namespaced_pod("p", NS)
    assert pod.spec.node_name  # the scheduler still works
    assert pod.status.phase == "Pending"
    sim.resume_kubelet()
    sim.run_until_idle()
    assert phase(core, "p") == "Running"


def test_real_clock_mode_runs_the_cluster_by_itself() -> None:
    cfg = ClusterConfig(start_latency=0.0, start_jitter=0.0, stop_latency=0.0)
    with KubeSim(cluster=cfg) as s, core_for(s) as core:
        rv = core.list_namespaced_pod(NS).metadata.resource_version
        core.create_namespaced_pod(NS, pod_body("p"))
        events = read_events(open_watch(core, timeout=10, resource_version=rv), limit=3)
    assert events[-1]["object"]["status"]["phase"] == "Running"


def test_create_pod_keeps_no_reference_to_the_callers_body(sim: KubeSim) -> None:
    """A stored pod changes only through a commit: editing the body afterwards changes nothing."""
    body = pod_body("p", labels={"app": "a"})
    sim.create_pod(body)
    body["metadata"]["labels"]["app"] = "edited"
    body["spec"]["containers"][0]["image"] = "edited"
    stored = sim.pod("p")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"app": "a"}
    assert stored["spec"]["containers"][0]["image"] == "busybox:1.36"
    assert "imagePullPolicy" not in body["spec"]["containers"][0]  # defaults stay server-side
