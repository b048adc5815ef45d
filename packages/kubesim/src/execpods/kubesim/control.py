"""The control endpoint under ``/_kubesim/``, so other processes and languages can script scenarios.

Every route takes and returns JSON; arguments are camelCase keys of the request body. The routes
map one to one onto :class:`~execpods.kubesim.api.KubeSim` methods (see docs/kubesim.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from execpods.kubesim.errors import ApiError
from execpods.kubesim.limits import DISTRIBUTIONS, Distribution

if TYPE_CHECKING:
    from execpods.kubesim.api import KubeSim

__all__ = ["ROUTES", "make_control"]

Action = Callable[["KubeSim", dict[str, Any]], Any]


def _opt_int(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return None if value is None else int(value)


def _opt_float(data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    return None if value is None else float(value)


def _distribution(value: object) -> Distribution:
    if value not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, not {value!r}")
    return cast(Distribution, value)


def _restart_soon(sim: KubeSim, data: dict[str, Any]) -> dict[str, Any]:
    """Restart from another thread once this answer is out: the restart ends every connection,
    this one included, and waits for their threads. Poll ``state`` for ``restarts``."""
    down = float(data.get("downSeconds", 0))
    forget = bool(data.get("forgetEvents", True))
    before = sim.restarts

    def run() -> None:
        time.sleep(0.2)
        with contextlib.suppress(RuntimeError):  # the simulator was closed meanwhile
            sim.restart(down_seconds=down, forget_events=forget)

    threading.Thread(target=run, name="kubesim-restart", daemon=True).start()
    return _ok(restarts=before)


def _manifests(data: dict[str, Any]) -> list[dict[str, Any]]:
    items = data.get("manifests")
    if not isinstance(items, list):
        raise ValueError('rbac/enable takes {"manifests": [...]} (parsed RBAC objects)')
    return items


def _ok(**extra: Any) -> dict[str, Any]:
    return {"ok": True, **extra}


def _void(action: Callable[[KubeSim, dict[str, Any]], object]) -> Action:
    """Wrap an action that returns nothing so the route answers ``{"ok": true}``."""

    def run(sim: KubeSim, data: dict[str, Any]) -> Any:
        action(sim, data)
        return _ok()

    return run


#: (method, route) -> action. Routes below are fixed; pods/<ns>/<name>/<act> and
#: nodes/<name>/<act> are matched separately.
ROUTES: dict[tuple[str, str], Action] = {
    ("GET", "state"): lambda s, d: s.state(),
    ("POST", "advance"): lambda s, d: _ok(ran=s.advance(float(d.get("seconds", 0))), now=s.now()),
    ("POST", "step"): lambda s, d: _ok(ran=s.step(), now=s.now()),
    ("POST", "run-until-idle"): lambda s, d: _ok(
        ran=s.run_until_idle(float(d.get("maxSeconds", 3600))), now=s.now()
    ),
    ("POST", "compact"): lambda s, d: _ok(resourceVersion=s.compact()),
    ("POST", "faults/expire-next"): _void(
        lambda s, d: s.expire_next(int(d.get("count", 1)), seconds=_opt_float(d, "seconds"))
    ),
    ("POST", "faults/expire-watches"): lambda s, d: _ok(watches=s.expire_watches()),
    ("POST", "faults/drop-watches"): lambda s, d: _ok(
        watches=s.drop_watches(abrupt=bool(d.get("abrupt", True)))
    ),
    ("POST", "faults/errors"): _void(
        lambda s, d: s.fail_requests(
            int(d.get("code", 503)), seconds=_opt_float(d, "seconds"), count=_opt_int(d, "count")
        )
    ),
    ("POST", "faults/throttle"): _void(
        lambda s, d: s.throttle(
            int(d.get("count", 1)),
            retry_after=int(d.get("retryAfter", 1)),
            seconds=_opt_float(d, "seconds"),
        )
    ),
    ("POST", "faults/drop-watches-every"): _void(
        lambda s, d: s.drop_watches_every(
            float(d.get("seconds", 0)), abrupt=bool(d.get("abrupt", True))
        )
    ),
    ("POST", "restart"): _restart_soon,
    ("POST", "config/failures"): _void(
        lambda s, d: s.set_failures(float(d.get("rate", 0)), after=float(d.get("after", 10)))
    ),
    ("POST", "faults/latency"): _void(lambda s, d: s.set_latency(float(d.get("seconds", 0)))),
    ("POST", "faults/reject-creates"): _void(
        lambda s, d: s.reject_creates(
            int(d.get("code", 403)), count=int(d.get("count", 1)), message=str(d.get("message", ""))
        )
    ),
    ("POST", "faults/clear"): _void(lambda s, d: s.clear_faults()),
    ("POST", "config/start-latency"): _void(
        lambda s, d: s.set_start_latency(
            float(d.get("mean", 1.0)),
            float(d.get("spread", 0.0)),
            distribution=_distribution(d.get("distribution", "uniform")),
        )
    ),
    ("POST", "config/create-rate"): _void(
        lambda s, d: s.set_create_rate(float(d.get("perSecond", 0)), burst=int(d.get("burst", 0)))
    ),
    ("POST", "rbac/enable"): _void(lambda s, d: s.enable_rbac(_manifests(d))),
    ("POST", "rbac/disable"): _void(lambda s, d: s.disable_rbac()),
    ("POST", "rbac/tokens"): lambda s, d: _ok(
        token=s.token_for(str(d["name"]), str(d.get("namespace", "default")), token=d.get("token"))
    ),
    ("POST", "kubelet/pause"): _void(lambda s, d: s.pause_kubelet()),
    ("POST", "kubelet/resume"): _void(lambda s, d: s.resume_kubelet()),
    ("GET", "nodes"): lambda s, d: [dataclasses.asdict(n) for n in s.nodes()],
    ("POST", "nodes"): lambda s, d: _ok(name=s.add_node(d.get("name"))),
    ("GET", "requests"): lambda s, d: [r.as_dict() for r in s.requests()],
    ("DELETE", "requests"): _void(lambda s, d: s.clear_requests()),
    ("GET", "requests/counts"): lambda s, d: s.request_counts(),
}

_POD_ACTIONS: dict[str, Callable[[KubeSim, str, str, dict[str, Any]], Any]] = {
    "fail": lambda s, ns, n, d: s.fail_pod(
        n,
        ns,
        exit_code=int(d.get("exitCode", 1)),
        reason=str(d.get("reason", "Error")),
        message=str(d.get("message", "")),
    ),
    "succeed": lambda s, ns, n, d: s.succeed_pod(n, ns),
    "oom": lambda s, ns, n, d: s.oom_kill(n, ns),
    "evict": lambda s, ns, n, d: s.evict(n, ns, message=str(d.get("message", ""))),
}


def _restore(sim: KubeSim, node: str) -> str:
    sim.restore_node(node)
    return node


_NODE_ACTIONS: dict[str, Callable[[KubeSim, str], Any]] = {
    "lose": lambda s, node: _ok(failed=[p["metadata"]["name"] for p in s.lose_node(node)]),
    "restore": lambda s, node: _ok(restored=_restore(s, node)),
}


def make_control(sim: KubeSim) -> Callable[[str, str, Any], tuple[int, Any]]:
    """The handler the server calls for ``/_kubesim/<route>``: returns (HTTP code, JSON body)."""

    def handle(method: str, route: str, data: Any) -> tuple[int, Any]:
        if not isinstance(data, dict):
            raise ApiError.bad_request("the control body must be a JSON object")
        route = route.strip("/")
        action = ROUTES.get((method, route))
        if action is not None:
            return 200, action(sim, data)
        parts = route.split("/")
        if method == "POST" and len(parts) == 4 and parts[0] == "pods" and parts[3] in _POD_ACTIONS:
            return 200, _POD_ACTIONS[parts[3]](sim, parts[1], parts[2], data)
        if (
            method == "POST"
            and len(parts) == 3
            and parts[0] == "nodes"
            and parts[2] in _NODE_ACTIONS
        ):
            try:
                return 200, _NODE_ACTIONS[parts[2]](sim, parts[1])
            except KeyError:
                raise ApiError(404, "NotFound", f'nodes "{parts[1]}" not found') from None
        raise ApiError(404, "NotFound", f"no kubesim control route {method} /_kubesim/{route}")

    return handle
