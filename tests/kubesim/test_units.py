"""Unit tests for the pure parts: selectors, patches, the event window and the virtual clock."""

from __future__ import annotations

import time
from typing import Any

import pytest
from execpods.kubesim.clock import VIRTUAL_EPOCH, VirtualClock
from execpods.kubesim.errors import ApiError
from execpods.kubesim.patch import apply_patch, json_patch, merge_patch, strategic_merge
from execpods.kubesim.pods import rfc3339, validate_pod
from execpods.kubesim.resources import as_table
from execpods.kubesim.selectors import SelectorError, parse_field_selector, parse_label_selector
from execpods.kubesim.store import PodStore
from hypothesis import given
from hypothesis import strategies as st


def pod(name: str, labels: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}, "uid": name},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": status,
    }


labels_st = st.dictionaries(
    st.sampled_from(["a", "b", "c"]), st.sampled_from(["1", "2", "3"]), max_size=3
)


@given(
    labels_st, st.sampled_from(["a", "b"]), st.sets(st.sampled_from(["1", "2", "3"]), min_size=1)
)
def test_in_and_notin_are_complements(labels: dict[str, str], key: str, values: set[str]) -> None:
    text = ",".join(sorted(values))
    inside = parse_label_selector(f"{key} in ({text})").matches(pod("p", labels))
    outside = parse_label_selector(f"{key} notin ({text})").matches(pod("p", labels))
    assert inside != outside
    assert inside == (labels.get(key) in values)


@pytest.mark.parametrize("text", ["a in", "a in (1", "=1", "a=1,", "a b", "a in (1 2)", "a=b=c"])
def test_bad_label_selectors(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(text)


@pytest.mark.parametrize(
    ("key", "value"), [("x" * 64, "v"), ("example.com/" + "x" * 64, "v"), ("k", "v" * 64)]
)
def test_pods_and_selectors_refuse_the_same_label_keys_and_values(key: str, value: str) -> None:
    with pytest.raises(ApiError) as exc:
        validate_pod(pod("p", {key: value}))
    assert exc.value.code == 422
    with pytest.raises(SelectorError):
        parse_label_selector(f"{key}={value}")
    validate_pod(pod("p", {key[:63]: value[:63]}))


def test_field_selector_escapes_and_inequality() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b,status.phase!=Running")
    assert sel.matches(pod("a,b", phase="Pending"))
    assert not sel.matches(pod("a,b", phase="Running"))
    assert not sel.matches(pod("a", phase="Pending"))


def test_strategic_merge_keys_and_directives() -> None:
    target: dict[str, Any] = {
        "conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}],
        "finalizers": ["x"],
        "labels": {"k": "v", "drop": "me"},
    }
    patch: dict[str, Any] = {
        "conditions": [{"type": "B", "status": "False"}, {"type": "C", "status": "True"}],
        "finalizers": ["y"],
        "labels": {"drop": None},
    }
    out: Any = strategic_merge(target, patch)
    assert out["conditions"] == [
        {"type": "A", "status": "True"},
        {"type": "B", "status": "False"},
        {"type": "C", "status": "True"},
    ]
    assert out["finalizers"] == ["x", "y"]
    assert out["labels"] == {"k": "v"}
    deleted: Any = strategic_merge(target, {"conditions": [{"type": "A", "$patch": "delete"}]})
    assert [c["type"] for c in deleted["conditions"]] == ["B"]
    assert target["conditions"][0] == {"type": "A", "status": "True"}  # input untouched


def test_merge_patch_and_json_patch() -> None:
    assert merge_patch({"a": [1, 2], "b": {"c": 1}}, {"a": [3], "b": {"c": None}}) == {
        "a": [3],
        "b": {},
    }
    doc: dict[str, Any] = {"a": [1, 2], "b": {"c": 1}}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "move", "from": "/b/c", "path": "/d"},
            {"op": "copy", "from": "/d", "path": "/e"},
            {"op": "remove", "path": "/a/0"},
            {"op": "replace", "path": "/e", "value": 9},
        ],
    )
    assert out == {"a": [2, 3], "b": {}, "d": 1, "e": 9}
    assert doc == {"a": [1, 2], "b": {"c": 1}}
    with pytest.raises(ApiError) as exc:
        json_patch(doc, [{"op": "replace", "path": "/missing", "value": 1}])
    assert exc.value.code == 422
    with pytest.raises(ApiError) as unsupported:
        apply_patch("application/xml", {}, {})
    assert unsupported.value.code == 415


def test_store_window_compaction_and_noop_updates() -> None:
    store = PodStore(event_window=2)
    store.create(pod("a"))
    rv_a = store.resource_version
    store.create(pod("b"))
    store.create(pod("c"))
    assert store.compacted_rv == rv_a  # the window holds two events
    with pytest.raises(ApiError) as exc:
        store.watch(None, lambda o: True, rv_a - 1)
    assert exc.value.code == 410
    watcher, initial = store.watch(None, lambda o: True, rv_a)
    assert initial == []
    assert [e.new["metadata"]["name"] for e in watcher.wait(0)] == ["b", "c"]
    before = store.resource_version
    store.update("default", "a", lambda o: o)
    assert store.resource_version == before
    assert watcher.wait(0) == []


def test_virtual_clock_runs_timers_in_order_only_when_advanced() -> None:
    clock = VirtualClock(start=100.0)
    seen: list[tuple[str, float]] = []
    clock.call_later(2, lambda: seen.append(("b", clock.now())))
    clock.call_later(1, lambda: seen.append(("a", clock.now())))
    cancelled = clock.call_later(1.5, lambda: seen.append(("x", clock.now())))
    cancelled.cancel()
    assert seen == []
    assert clock.advance(1.5) == 1
    assert seen == [("a", 101.0)]
    assert clock.run_until_idle() == 1
    assert seen == [("a", 101.0), ("b", 102.0)]
    assert not clock.step()


def test_closed_watches_stop_counting_at_once() -> None:
    """A test that drops watches and then waits for the client's next watch must not be fooled
    by the closed one, which stays registered until its server thread has finished writing."""
    store = PodStore()
    closed, _ = store.watch(None, lambda o: True, None)
    assert store.watcher_count() == 1
    assert store.close_watchers() == 1
    assert closed.closed
    assert store.watcher_count() == 0
    assert not store.wait_for_watchers(1, 0)
    store.create(pod("a"))
    assert closed.wait(0) == []  # nothing is pushed to a closed watch
    again, _ = store.watch(None, lambda o: True, None)
    assert store.wait_for_watchers(1, 0)
    assert store.close_watchers() == 1  # only the open one
    store.unwatch(closed)  # the server thread's late unwatch is harmless
    store.unwatch(again)
    assert store.watcher_count() == 0


def test_table_age_does_not_depend_on_the_local_timezone(monkeypatch: pytest.MonkeyPatch) -> None:
    """kubectl's AGE column: a UTC timestamp read back in a zone that is on summer time."""
    created = VIRTUAL_EPOCH + 180 * 86_400  # in July
    listed = pod("p")
    listed["metadata"]["creationTimestamp"] = rfc3339(created)
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        row = as_table(listed, created + 30)["rows"][0]
    finally:
        monkeypatch.undo()
        time.tzset()
    assert row["cells"][4] == "30s"
