"""Issue 32: what a caller's template may not undo, and what a declared profile's pod must pass.

On `128638e` a profile template's `allowPrivilegeEscalation: true` overrode the operator's
`false` (a profile template is kept as Spark's own builder made it), and a pod the Kubernetes
client's model refuses was found out only at every create.
"""

from __future__ import annotations

import pytest
from execpods.core import ResourceProfile, ResourceProfiles, SettingsError
from execpods.k8s import ExecutorPodTemplateBuilder, KubernetesSettings, parse_pod_template

from tests.k8s.conftest import IMAGE

ESCALATING = """
spec:
  containers:
    - name: spark-kubernetes-executor
      securityContext:
        allowPrivilegeEscalation: true
"""


def shaped(template: str, **properties: str) -> ExecutorPodTemplateBuilder:
    profile = ResourceProfile(id=3, pod_template=parse_pod_template(template, what="profile 3"))
    settings = KubernetesSettings.from_properties(
        {"spark.kubernetes.container.image": IMAGE, **properties}
    )
    return ExecutorPodTemplateBuilder(
        settings=settings, namespace="spark", profiles=ResourceProfiles([profile])
    )


def escalation(builder: ExecutorPodTemplateBuilder) -> object:
    pod = builder.build(executor_id=1, app_id="app", resource_profile_id=3)
    (container,) = pod["spec"]["containers"]
    return container["securityContext"]["allowPrivilegeEscalation"]


def test_the_operators_no_escalation_wins_over_a_templates_yes() -> None:
    assert escalation(shaped(ESCALATING)) is False
    allowed = {"spark.kubernetes.executor.securityContext.allowPrivilegeEscalation": "true"}
    assert escalation(shaped(ESCALATING, **allowed)) is True


def test_a_template_may_tighten_what_the_operator_allows() -> None:
    tighter = ESCALATING.replace("true", "false")
    allowed = {"spark.kubernetes.securityContext.allowPrivilegeEscalation": "true"}
    assert escalation(shaped(tighter, **allowed)) is False


def test_a_privileged_template_under_no_escalation_is_refused_where_it_is_declared() -> None:
    privileged = ESCALATING.replace("allowPrivilegeEscalation: true", "privileged: true")
    builder = shaped(privileged)
    profile = builder.profiles.get(3) if builder.profiles is not None else None
    with pytest.raises(SettingsError, match="privileged is true while allowPrivilegeEscalation"):
        builder.check(profile, app_id="app")


def test_a_list_given_as_a_string_is_refused_where_it_is_declared() -> None:
    builder = shaped(ESCALATING.replace("allowPrivilegeEscalation: true", "capabilities: {add: X}"))
    profile = builder.profiles.get(3) if builder.profiles is not None else None
    with pytest.raises(SettingsError, match=r"capabilities\.add: Input should be a valid list"):
        builder.check(profile, app_id="app")
    builder.check(None, app_id="app")  # the settings' own pod passes
