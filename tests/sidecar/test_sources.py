"""The watch and poll switches, end to end: each source decides for itself whether it runs."""

from __future__ import annotations

import pytest
from execpods.client import AllocatorClient
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import SidecarFactory, wait_for


@pytest.mark.parametrize("off", ["enableApiWatcher", "enableApiPolling"])
def test_with_one_source_off_the_other_alone_brings_executors_up(
    sim: KubeSim, make_sidecar: SidecarFactory, off: str
) -> None:
    sidecar = make_sidecar(
        "one-source",
        conf={
            f"spark.kubernetes.executor.{off}": "false",
            "spark.kubernetes.executor.apiPollingInterval": "100ms",
        },
    )
    with AllocatorClient(sidecar.address) as client:
        client.request_total(3)
        wait_for(lambda: client.request_total(3).running == 3, what="the sidecar sees 3 running")
    counts = sim.request_counts()
    if off == "enableApiWatcher":
        assert counts.get("watch", 0) == 0, counts
        assert counts.get("list", 0) >= 2, counts  # the polls saw the pods start
    else:
        assert counts.get("watch", 0) >= 1, counts
        # The watch's initial list and the allocator's adoption list (issue 11); no polls.
        assert counts.get("list", 0) <= 2, counts


def test_the_sources_read_their_lists_in_pages_of_the_configured_size(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    """execpods.kubernetes.listPageSize reaches the watch's and the poll's lists: with pages of 2,
    5 executors take 3 pages per list, and every executor is still seen."""
    sidecar = make_sidecar(
        "paged",
        conf={
            "execpods.kubernetes.listPageSize": "2",
            "spark.kubernetes.executor.enableApiWatcher": "false",
            "spark.kubernetes.executor.apiPollingInterval": "100ms",
        },
    )
    with AllocatorClient(sidecar.address) as client:
        client.request_total(5)
        wait_for(lambda: client.request_total(5).running == 5, what="the sidecar sees 5 running")
    lists = [r.query for r in sim.requests() if r.verb == "list" and r.path.endswith("/pods")]
    assert lists, "no lists"
    assert {q.get("limit") for q in lists} == {"2"}
    assert any(q.get("continue") for q in lists)  # a poll of 5 pods took more than one page


def test_lists_are_paginated_by_default(sim: KubeSim, make_sidecar: SidecarFactory) -> None:
    sidecar = make_sidecar("default-pages")
    with AllocatorClient(sidecar.address) as client:
        client.request_total(1)
        wait_for(lambda: client.request_total(1).running == 1, what="the sidecar sees 1 running")
    lists = [r.query for r in sim.requests() if r.verb == "list"]
    assert lists
    assert {q.get("limit") for q in lists} == {"500"}
