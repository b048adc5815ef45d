"""The demo runs end to end (small and quick here) and leaves no pod behind."""

from __future__ import annotations

import io

import pytest
from execpods.devtools.demo import build_parser, run_demo


@pytest.mark.slow
def test_the_demo_finishes_with_no_pods_left() -> None:
    args = build_parser().parse_args(
        ["--executors", "6", "--start-latency", "0.2", "--batch-delay", "150ms"]
    )
    out = io.StringIO()
    assert run_demo(args, out) == 0
    text = out.getvalue()
    assert "asking for 6 executors" in text  # --executors is what the driver asks for
    assert "replaced: 6 executors running again" in text
    assert "scaled down to 2 executors" in text
    assert "exit code 137" in text
    assert "terminated(exitCode=137, reason=OOMKilled" in text  # the API's reason, in full
    assert "pods left in the cluster: 0" in text
