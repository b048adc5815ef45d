"""The control endpoint under ``/_kubesim/``, so other processes and languages can script scenarios.

Every route takes and returns JSON; arguments are camelCase keys of the request body. The routes
map one to one onto :class:`~execpods.kubesim.api.KubeSim` methods (see docs/kubesim.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol, cast

from execpods.kubesim.apf import ApfConfig, FairQueues, config_from_json
from execpods.kubesim.bodies import JsonObject, JsonValue, Pod
from execpods.kubesim.cluster import NodeInfo
from execpods.kubesim.errors import ApiError
from execpods.kubesim.faults import RequestRecord
from execpods.kubesim.limits import DISTRIBUTIONS, Distribution

__all__ = ["ROUTES", "AnswerThen", "Args", "make_control"]

Reply = object  # anything orjson can write: JSON values, pods, dataclass dicts
Action = Callable[["Simulator", "Args"], Reply]


class Simulator(Protocol):
    """What the control endpoint drives: `Simulator`'s scripting methods (the routes map one to
    one onto them). A Protocol, so that this module need not import `api` (which builds the
    server with this module's handler)."""

    def restart(self, *, down_seconds: float = 0.0, forget_events: bool = True) -> None: ...

    def now(self) -> float: ...

    def advance(self, seconds: float) -> int: ...

    def step(self) -> bool: ...

    def run_until_idle(self, max_seconds: float = 3600.0) -> int: ...

    def fail_pod(
        self,
        name: str,
        namespace: str = "default",
        *,
        exit_code: int = 1,
        reason: str = "Error",
        message: str = "",
    ) -> Pod: ...

    def succeed_pod(self, name: str, namespace: str = "default") -> Pod: ...

    def oom_kill(self, name: str, namespace: str = "default") -> Pod: ...

    def evict(
        self, name: str, namespace: str = "default", *, message: str = "", cause: str = "Evicted"
    ) -> Pod: ...

    def lose_node(self, node: str) -> list[Pod]: ...

    def restore_node(self, node: str) -> None: ...

    def add_node(self, name: str | None = None) -> str: ...

    def nodes(self) -> list[NodeInfo]: ...

    def pause_kubelet(self) -> None: ...

    def resume_kubelet(self) -> None: ...

    def set_start_latency(
        self, mean: float, spread: float = 0.0, *, distribution: Distribution = "uniform"
    ) -> None: ...

    def set_create_rate(self, per_second: float, *, burst: int = 0) -> None: ...

    def compact(self) -> str: ...

    def expire_next(self, count: int = 1, *, seconds: float | None = None) -> None: ...

    def expire_watches(self) -> int: ...

    def drop_watches(self, *, abrupt: bool = True) -> int: ...

    def fail_requests(
        self, code: int = 503, *, seconds: float | None = None, count: int | None = None
    ) -> None: ...

    def throttle(
        self, count: int = 1, *, retry_after: int = 1, seconds: float | None = None
    ) -> None: ...

    def drop_watches_every(self, seconds: float, *, abrupt: bool = True) -> None: ...

    def set_failures(self, rate: float, *, after: float = 10.0) -> None: ...

    def set_latency(self, seconds: float) -> None: ...

    def reject_creates(self, code: int = 403, *, count: int = 1, message: str = "") -> None: ...

    def clear_faults(self) -> None: ...

    def deny_deletes(
        self,
        labels: Mapping[str, str],
        *,
        code: int = 403,
        message: str = "",
        count: int | None = None,
    ) -> None: ...

    def enable_rbac(self, manifests: Iterable[Mapping[str, object]]) -> None: ...

    def disable_rbac(self) -> None: ...

    def token_for(
        self, name: str, namespace: str = "default", *, token: str | None = None
    ) -> str: ...

    def requests(self) -> list[RequestRecord]: ...

    def request_counts(self) -> dict[str, int]: ...

    @property
    def apf(self) -> FairQueues: ...

    def configure_apf(self, config: ApfConfig) -> None: ...

    def peak_request_rate(
        self, window: float = 1.0, verbs: Collection[str] | None = None
    ) -> float: ...

    def clear_requests(self) -> None: ...

    def state(self) -> dict[str, object]: ...

    @property
    def restarts(self) -> int: ...


_MISSING = object()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AnswerThen:
    """A reply, and what to start on a thread of its own once the reply has been written (an
    action that would cut the connection the reply goes out on)."""

    reply: Reply
    then: Callable[[], None]
    name: str


class Args:
    """A control body's arguments, each read with its type: a wrong one is a ValueError, which
    the server answers as 400 naming the argument."""

    def __init__(self, data: JsonObject) -> None:
        self._data = data

    def _get(self, key: str, default: object) -> object:
        value = self._data.get(key, default)
        if value is _MISSING:
            raise ValueError(f"the control body needs {key!r}")
        return value

    def number(self, key: str, default: float | object = _MISSING) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"{key!r} must be a number, not {value!r}")
        return float(value)

    def integer(self, key: str, default: int | object = _MISSING) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"{key!r} must be an integer, not {value!r}")
        return int(value)

    def opt_number(self, key: str) -> float | None:
        return None if self._data.get(key) is None else self.number(key)

    def opt_integer(self, key: str) -> int | None:
        return None if self._data.get(key) is None else self.integer(key)

    def text(self, key: str, default: str | object = _MISSING) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            raise ValueError(f"{key!r} must be a string, not {value!r}")
        return value

    def opt_text(self, key: str) -> str | None:
        return None if self._data.get(key) is None else self.text(key)

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise ValueError(f"{key!r} must be true or false, not {value!r}")
        return value

    def raw(self) -> dict[str, object]:
        return dict(self._data)

    def labels(self, key: str) -> dict[str, str]:
        value = self._data.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError(f"{key!r} must be a map of label keys to values")
        return {str(k): str(v) for k, v in value.items()}

    def objects(self, key: str) -> list[JsonObject]:
        value = self._data.get(key)
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise ValueError(f"{key!r} must be a list of objects")
        return [v for v in value if isinstance(v, dict)]


def _distribution(value: object) -> Distribution:
    if value not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, not {value!r}")
    return cast(Distribution, value)


def _restart_soon(sim: Simulator, data: Args) -> AnswerThen:
    """Restart once this answer is written: the restart ends every connection, this one
    included, and waits for their threads, so it runs on a thread of its own. Poll ``state`` for
    ``restarts``."""
    down = data.number("downSeconds", 0)
    forget = data.flag("forgetEvents", True)
    before = sim.restarts

    def run() -> None:
        with contextlib.suppress(RuntimeError):  # the simulator was closed meanwhile
            sim.restart(down_seconds=down, forget_events=forget)

    return AnswerThen(reply=_ok(restarts=before), then=run, name="kubesim-restart")


def _peak_rate(sim: Simulator, data: Args) -> JsonObject:
    text = data.opt_text("verbs")
    verbs = None if text is None else [v for v in text.split(",") if v]
    return _ok(perSecond=sim.peak_request_rate(data.number("window", 1.0), verbs))


def _apf_state(sim: Simulator) -> Reply:
    apf: FairQueues = sim.apf
    return apf.state()


def _apf(sim: Simulator, data: Args) -> JsonObject:
    """Change API Priority and Fairness: the body's camelCase keys (seats, serviceTime,
    otherTenants, schedule...), the rest as they were; answers the new state."""
    apf: FairQueues = sim.apf
    sim.configure_apf(config_from_json(apf.config, data.raw()))
    return _ok(apf=cast(JsonValue, apf.state()))


def _ok(**extra: JsonValue) -> JsonObject:
    return {"ok": True, **extra}


def _void(action: Callable[[Simulator, Args], object]) -> Action:
    """Wrap an action that returns nothing so the route answers ``{"ok": true}``."""

    def run(sim: Simulator, data: Args) -> Reply:
        action(sim, data)
        return _ok()

    return run


#: (method, route) -> action. Routes below are fixed; pods/<ns>/<name>/<act> and
#: nodes/<name>/<act> are matched separately.
ROUTES: dict[tuple[str, str], Action] = {
    ("GET", "state"): lambda s, d: s.state(),
    ("POST", "advance"): lambda s, d: _ok(ran=s.advance(d.number("seconds", 0)), now=s.now()),
    ("POST", "step"): lambda s, d: _ok(ran=s.step(), now=s.now()),
    ("POST", "run-until-idle"): lambda s, d: _ok(
        ran=s.run_until_idle(d.number("maxSeconds", 3600)), now=s.now()
    ),
    ("POST", "compact"): lambda s, d: _ok(resourceVersion=s.compact()),
    ("POST", "faults/expire-next"): _void(
        lambda s, d: s.expire_next(d.integer("count", 1), seconds=d.opt_number("seconds"))
    ),
    ("POST", "faults/expire-watches"): lambda s, d: _ok(watches=s.expire_watches()),
    ("POST", "faults/drop-watches"): lambda s, d: _ok(
        watches=s.drop_watches(abrupt=d.flag("abrupt", True))
    ),
    ("POST", "faults/errors"): _void(
        lambda s, d: s.fail_requests(
            d.integer("code", 503), seconds=d.opt_number("seconds"), count=d.opt_integer("count")
        )
    ),
    ("POST", "faults/throttle"): _void(
        lambda s, d: s.throttle(
            d.integer("count", 1),
            retry_after=d.integer("retryAfter", 1),
            seconds=d.opt_number("seconds"),
        )
    ),
    ("POST", "faults/drop-watches-every"): _void(
        lambda s, d: s.drop_watches_every(d.number("seconds", 0), abrupt=d.flag("abrupt", True))
    ),
    ("POST", "restart"): _restart_soon,
    ("POST", "config/failures"): _void(
        lambda s, d: s.set_failures(d.number("rate", 0), after=d.number("after", 10))
    ),
    ("POST", "faults/latency"): _void(lambda s, d: s.set_latency(d.number("seconds", 0))),
    ("POST", "faults/reject-creates"): _void(
        lambda s, d: s.reject_creates(
            d.integer("code", 403), count=d.integer("count", 1), message=d.text("message", "")
        )
    ),
    ("POST", "faults/deny-deletes"): _void(
        lambda s, d: s.deny_deletes(
            d.labels("labels"),
            code=d.integer("code", 403),
            message=d.text("message", ""),
            count=d.opt_integer("count"),
        )
    ),
    ("POST", "faults/clear"): _void(lambda s, d: s.clear_faults()),
    ("POST", "config/start-latency"): _void(
        lambda s, d: s.set_start_latency(
            d.number("mean", 1.0),
            d.number("spread", 0.0),
            distribution=_distribution(d.text("distribution", "uniform")),
        )
    ),
    ("POST", "config/create-rate"): _void(
        lambda s, d: s.set_create_rate(d.number("perSecond", 0), burst=d.integer("burst", 0))
    ),
    ("GET", "apf"): lambda s, d: _apf_state(s),
    ("POST", "config/apf"): _apf,
    ("POST", "rbac/enable"): _void(lambda s, d: s.enable_rbac(d.objects("manifests"))),
    ("POST", "rbac/disable"): _void(lambda s, d: s.disable_rbac()),
    ("POST", "rbac/tokens"): lambda s, d: _ok(
        token=s.token_for(d.text("name"), d.text("namespace", "default"), token=d.opt_text("token"))
    ),
    ("POST", "kubelet/pause"): _void(lambda s, d: s.pause_kubelet()),
    ("POST", "kubelet/resume"): _void(lambda s, d: s.resume_kubelet()),
    ("GET", "nodes"): lambda s, d: [dataclasses.asdict(n) for n in s.nodes()],
    ("POST", "nodes"): lambda s, d: _ok(name=s.add_node(d.opt_text("name"))),
    ("GET", "requests"): lambda s, d: [r.as_dict() for r in s.requests()],
    ("DELETE", "requests"): _void(lambda s, d: s.clear_requests()),
    ("GET", "requests/counts"): lambda s, d: s.request_counts(),
    ("GET", "requests/peak-rate"): _peak_rate,
    ("POST", "requests/peak-rate"): _peak_rate,
}

_POD_ACTIONS: dict[str, Callable[[Simulator, str, str, Args], Reply]] = {
    "fail": lambda s, ns, n, d: s.fail_pod(
        n,
        ns,
        exit_code=d.integer("exitCode", 1),
        reason=d.text("reason", "Error"),
        message=d.text("message", ""),
    ),
    "succeed": lambda s, ns, n, d: s.succeed_pod(n, ns),
    "oom": lambda s, ns, n, d: s.oom_kill(n, ns),
    "evict": lambda s, ns, n, d: s.evict(
        n, ns, message=d.text("message", ""), cause=d.text("cause", "Evicted")
    ),
}


def _restore(sim: Simulator, node: str) -> str:
    sim.restore_node(node)
    return node


_NODE_ACTIONS: dict[str, Callable[[Simulator, str], Reply]] = {
    "lose": lambda s, node: _ok(failed=[p["metadata"]["name"] for p in s.lose_node(node)]),
    "restore": lambda s, node: _ok(restored=_restore(s, node)),
}


def make_control(sim: Simulator) -> Callable[[str, str, JsonValue], tuple[int, Reply]]:
    """The handler the server calls for ``/_kubesim/<route>``: returns (HTTP code, JSON body)."""

    def handle(method: str, route: str, body: JsonValue) -> tuple[int, Reply]:
        if not isinstance(body, dict):
            raise ApiError.bad_request("the control body must be a JSON object")
        data = Args(body)
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
