"""Executor ids beyond int64 (issue 11): valid label values, but no id the contract can carry.

The adapter's conversion skips such a pod as malformed, under the configured label key, so the
core never sees it; the core's label parser refuses it too, for pods from anywhere else.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest
from execpods.core import SPARK_LABELS, ExecutorPodsSnapshot
from execpods.core.idlists import INT64_MAX
from execpods.k8s import MalformedPod, pod_from_dict, pod_from_dict_strict, pods_from_list


def _pod(executor_id: str, *, key: str = "spark-exec-id") -> dict[str, Any]:
    return {"metadata": {"name": f"p-{executor_id[:10]}", "labels": {key: executor_id}}}


@pytest.mark.parametrize(
    ("executor_id", "kept"),
    [
        (str(INT64_MAX), True),
        (str(INT64_MAX + 1), False),
        ("99999999999999999999", False),
        ("0" * 30 + "7", True),  # leading zeros: the core's label parser skips it (issue 20)
        ("1" * 300, False),
        ("seven", True),  # not digits: for the core's label parser to judge, as before
    ],
)
def test_ids_beyond_int64_are_malformed(executor_id: str, kept: bool) -> None:
    if kept:
        assert pod_from_dict_strict(_pod(executor_id)).name.startswith("p-")
    else:
        with pytest.raises(MalformedPod, match="beyond 64 bits"):
            pod_from_dict_strict(_pod(executor_id))


def test_the_configured_label_key_is_the_one_checked(caplog: pytest.LogCaptureFixture) -> None:
    huge = str(INT64_MAX + 1)
    assert pod_from_dict(_pod(huge, key="my-id")) is not None  # not the id label by default
    caplog.set_level(logging.WARNING)
    assert pod_from_dict(_pod(huge, key="my-id"), executor_id_label="my-id") is None
    assert "beyond 64 bits" in caplog.text
    pods, _ = pods_from_list({"items": [_pod(huge), _pod("3")]})
    assert [p.name for p in pods] == ["p-3"]


def test_the_core_label_parser_refuses_them_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    labels = {"spark-exec-id": str(INT64_MAX + 1)}
    assert SPARK_LABELS.executor_id_of("p", labels) is None
    assert "beyond 64 bits" in caplog.text
    assert SPARK_LABELS.executor_id_of("p", {"spark-exec-id": str(INT64_MAX)}) == INT64_MAX


def test_ids_too_long_for_int_are_refused_not_crashed() -> None:
    """int() refuses strings of over 4,300 digits with a ValueError: no path may reach it."""
    with pytest.raises(MalformedPod, match="beyond 64 bits"):
        pod_from_dict_strict(_pod("9" * 5000))
    assert SPARK_LABELS.executor_id_of("p", {"spark-exec-id": "9" * 5000}) is None
    # Leading zeros are no executor id's spelling (issue 20, defect 10): skipped, not parsed.
    assert SPARK_LABELS.executor_id_of("p", {"spark-exec-id": "0" * 5000 + "7"}) is None


def test_the_conversion_parses_the_id_once_and_the_snapshot_reads_it() -> None:
    """A watch event's executor id is parsed where the pod is converted (`ExecutorPod.executor_id`);
    the snapshot reads that, not the label again."""
    pod = pod_from_dict_strict(_pod("42"))
    assert pod.executor_id == 42
    assert pod_from_dict_strict(_pod("42", key="other-key")).executor_id is None
    assert pod_from_dict_strict(_pod("42", key="x"), executor_id_label="x").executor_id == 42
    # A pod whose parsed id and label disagree can only come from the field: the snapshot uses it.
    relabelled = replace(pod, labels={**pod.labels, "spark-exec-id": "43"})
    snapshot = ExecutorPodsSnapshot.from_pods([relabelled])
    assert set(snapshot.executor_pods) == {42}
    assert set(snapshot.with_update(relabelled).executor_pods) == {42}
