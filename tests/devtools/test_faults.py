"""The fault suite's short run (issue 11): every scenario on kubesim, each bounded in time.

Each scenario reaches its target again after the fault, uses every executor id once, reports each
lost executor to the driver exactly once, keeps the API request rate within the configured limit
and leaves no executor pod (and an untouched bystander) after shutdown. The soak version is
`python -m execpods.devtools.faults --soak` (docs/reliability.md).
"""

from __future__ import annotations

import pytest
from execpods.devtools.faults import SCENARIOS, SHORT, run_scenario, table


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_sidecar_recovers_from(name: str) -> None:
    result = run_scenario(name, SCENARIOS[name], SHORT)
    assert result.passed, f"{table([result])}\n{result.notes}"
    assert result.seconds < SHORT.deadline
