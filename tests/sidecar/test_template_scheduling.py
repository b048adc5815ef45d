"""Issue 32 (also noted): where a caller's template may put executors, beyond PSS baseline.

The Pod Security Standards leave scheduling alone; on `128638e` a caller's template could pin
executor pods to a node (`nodeName`, skipping the scheduler and its taints), tolerate every taint
or the control plane's, and take the cluster's own `system-` priority class. Each is refused under
every policy but `none`, naming the field; what pod templates are for (a GPU pool's toleration, a
node selector, an ordinary priority class) stays allowed.
"""

from __future__ import annotations

from typing import Any

import pytest
from execpods.sidecar.guard.templatepolicy import (
    PolicyRefusal,
    TemplatePolicy,
    TemplatePolicyLevel,
)

BASELINE = TemplatePolicy(namespace="spark")


def pod(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "executor", "image": "x"}], **spec}}


@pytest.mark.parametrize(
    ("template", "field"),
    [
        (pod(nodeName="control-plane-1"), "spec.nodeName"),
        (pod(tolerations=[{"operator": "Exists"}]), "spec.tolerations[0]"),
        (
            pod(
                tolerations=[
                    {"key": "gpu", "operator": "Exists"},
                    {
                        "key": "node-role.kubernetes.io/control-plane",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    },
                ]
            ),
            "spec.tolerations[1].key",
        ),
        (pod(tolerations=[{"key": "node-role.kubernetes.io/master"}]), "spec.tolerations[0].key"),
        (pod(priorityClassName="system-cluster-critical"), "spec.priorityClassName"),
        (pod(priorityClassName="system-node-critical"), "spec.priorityClassName"),
    ],
)
@pytest.mark.parametrize("level", [TemplatePolicyLevel.BASELINE, TemplatePolicyLevel.RESTRICTED])
def test_scheduling_beyond_the_operators_is_refused_naming_the_field(
    template: dict[str, Any], field: str, level: TemplatePolicyLevel
) -> None:
    with pytest.raises(PolicyRefusal) as refused:
        TemplatePolicy(level=level, namespace="spark").check(template)
    assert str(refused.value).startswith(field), refused.value


def test_what_pod_templates_are_for_stays_allowed() -> None:
    BASELINE.check(
        pod(
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            nodeSelector={"pool": "spot"},
            priorityClassName="spark-batch",
        )
    )
    TemplatePolicy(level=TemplatePolicyLevel.NONE).check(pod(nodeName="anywhere"))
