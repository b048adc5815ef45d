"""The labels a removal is counted under: few values each, and OOM kills told apart."""

from __future__ import annotations

import pytest
from execpods.core import ExecutorExited
from execpods.sidecar.telemetry.metrics import removal_labels


@pytest.mark.parametrize(
    ("exited", "labels"),
    [
        (
            ExecutorExited(exit_code=137, exit_caused_by_app=True, message="x"),
            ("exited", "oom_killed"),
        ),
        (
            ExecutorExited(exit_code=1, exit_caused_by_app=True, message="reason: OOMKilled"),
            ("exited", "oom_killed"),
        ),
        (
            ExecutorExited(exit_code=52, exit_caused_by_app=True, message=""),
            ("exited", "jvm_out_of_memory"),
        ),
        (ExecutorExited(exit_code=1, exit_caused_by_app=True, message=""), ("exited", "error")),
        (ExecutorExited(exit_code=0, exit_caused_by_app=True, message=""), ("exited", "success")),
        (
            ExecutorExited(
                exit_code=143, exit_caused_by_app=False, message="", killed_by_driver=True
            ),
            ("killed_by_driver", "terminated"),
        ),
        (
            ExecutorExited(
                exit_code=-1, exit_caused_by_app=False, message="", killed_by_driver=True
            ),
            ("killed_by_driver", "unknown"),
        ),
        (
            ExecutorExited(exit_code=-1, exit_caused_by_app=False, message="deleted"),
            ("lost", "deleted"),
        ),
        (
            ExecutorExited(exit_code=143, exit_caused_by_app=False, message=""),
            ("lost", "terminated"),
        ),
    ],
)
def test_removal_labels(exited: ExecutorExited, labels: tuple[str, str]) -> None:
    assert removal_labels(exited) == labels
