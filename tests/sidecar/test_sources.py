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
