"""Spark's executor-pod properties: labels, annotations, node selectors, scheduler, service
account, image pull policy and secrets, and the memory overhead's factor and minimum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from execpods.core import SettingsError
from execpods.k8s import (
    KubernetesPodOperations,
    KubernetesSettings,
    load_template,
)
from execpods.kubesim import KubeSim

from tests.k8s.conftest import built_executor_pod

SPARK_POD_PROPERTIES = {
    "spark.kubernetes.executor.label.team": "data",
    "spark.kubernetes.executor.label.run": "{{APP_ID}}-{{EXECUTOR_ID}}",
    "spark.kubernetes.executor.annotation.example.com/owner": "exec {{EXECUTOR_ID}} of {{APP_ID}}",
    "spark.kubernetes.node.selector.pool": "spark",
    "spark.kubernetes.node.selector.zone": "a",
    "spark.kubernetes.executor.node.selector.zone": "b",
    "spark.kubernetes.scheduler.name": "common-scheduler",
    "spark.kubernetes.executor.scheduler.name": "executor-scheduler",
    "spark.kubernetes.container.image.pullPolicy": "Always",
    "spark.kubernetes.container.image.pullSecrets": "reg-a, ,reg-b",
    "spark.kubernetes.authenticate.driver.serviceAccountName": "driver-sa",
}


def build(properties: dict[str, str], template: dict[str, Any] | None = None) -> dict[str, Any]:
    return built_executor_pod(properties, template, executor_id=3)


def test_every_property_lands_where_spark_puts_it() -> None:
    pod = build(SPARK_POD_PROPERTIES)
    metadata, spec = pod["metadata"], pod["spec"]
    assert metadata["labels"]["team"] == "data"
    assert metadata["labels"]["run"] == "app-3"
    assert metadata["labels"]["spark-exec-id"] == "3"
    assert metadata["annotations"] == {"example.com/owner": "exec 3 of app"}
    assert spec["nodeSelector"] == {"pool": "spark", "zone": "b"}  # the executor's wins
    assert spec["schedulerName"] == "executor-scheduler"
    assert spec["serviceAccountName"] == "driver-sa"
    assert spec["imagePullSecrets"] == [{"name": "reg-a"}, {"name": "reg-b"}]
    assert spec["containers"][0]["imagePullPolicy"] == "Always"


def test_fallbacks_and_defaults() -> None:
    spec = build(
        {
            "spark.kubernetes.scheduler.name": "common-scheduler",
            "spark.kubernetes.authenticate.driver.serviceAccountName": "driver-sa",
            "spark.kubernetes.authenticate.executor.serviceAccountName": "executor-sa",
        }
    )["spec"]
    assert spec["schedulerName"] == "common-scheduler"
    assert spec["serviceAccountName"] == "executor-sa"
    plain = build({})
    assert plain["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    for absent in ("schedulerName", "serviceAccountName", "imagePullSecrets", "nodeSelector"):
        assert absent not in plain["spec"]
    assert "annotations" not in plain["metadata"]


def test_a_templates_own_service_account_and_secrets_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(
        "spec:\n  serviceAccountName: from-template\n"
        "  imagePullSecrets: [{name: reg-a}, {name: tmpl}]\n"
        "  nodeSelector: {disk: ssd}\n",
        encoding="utf-8",
    )
    spec = build(SPARK_POD_PROPERTIES, load_template(path))["spec"]
    assert spec["serviceAccountName"] == "from-template"
    assert spec["imagePullSecrets"] == [{"name": "reg-a"}, {"name": "tmpl"}, {"name": "reg-b"}]
    assert spec["nodeSelector"] == {"disk": "ssd", "pool": "spark", "zone": "b"}


@pytest.mark.parametrize(
    "label", ["spark-app-selector", "spark-role", "spark-exec-id", "spark-exec-resourceprofile-id"]
)
def test_a_label_execpods_selects_by_cannot_be_set(label: str) -> None:
    with pytest.raises(SettingsError, match=rf"spark\.kubernetes\.executor\.label\.{label}"):
        build({f"spark.kubernetes.executor.label.{label}": "x"})


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("spark.kubernetes.executor.label.bad key", "label key"),
        ("spark.kubernetes.executor.annotation.-x", "label key"),
        ("spark.kubernetes.node.selector.a/b/c", "label key"),
        ("spark.executorEnv.1BAD", "environment variable name"),
        ("spark.kubernetes.container.image.pullPolicy", "Always, Never or IfNotPresent"),
        # Spark's own ranges: > 0 for the executor's factor, >= 0 for Kubernetes' (no upper bound).
        ("spark.executor.memoryOverheadFactor", "must be positive"),
        ("spark.kubernetes.memoryOverheadFactor", "must not be negative"),
    ],
)
def test_bad_values_are_refused_naming_the_property(key: str, words: str) -> None:
    with pytest.raises(SettingsError) as raised:
        KubernetesSettings.from_properties({key: "-0.5" if "Factor" in key else "sometimes"})
    assert key in str(raised.value)
    assert words in str(raised.value)


def test_overhead_factors_above_one_are_accepted_as_spark_accepts_them() -> None:
    settings = KubernetesSettings.from_properties(
        {"spark.executor.memory": "1g", "spark.executor.memoryOverheadFactor": "1.5"}
    )
    assert settings.memory_overhead == 1536
    assert KubernetesSettings.from_properties({"spark.kubernetes.memoryOverheadFactor": "0"})


@pytest.mark.parametrize(
    ("properties", "memory"),
    [
        ({"spark.executor.memory": "4g"}, "4505Mi"),  # 10% is 409, above the 384 minimum
        ({"spark.executor.memory": "4g", "spark.executor.memoryOverheadFactor": "0.25"}, "5120Mi"),
        ({"spark.executor.memory": "4g", "spark.kubernetes.memoryOverheadFactor": "0.5"}, "6144Mi"),
        (
            {
                "spark.executor.memory": "4g",
                "spark.executor.memoryOverheadFactor": "0.25",
                "spark.kubernetes.memoryOverheadFactor": "0.5",
            },
            "5120Mi",  # the executor's factor wins
        ),
        ({"spark.executor.memory": "1g", "spark.executor.minMemoryOverhead": "1g"}, "2048Mi"),
        ({"spark.executor.memory": "1g", "spark.executor.minMemoryOverhead": "0"}, "1126Mi"),
        (
            {"spark.executor.memoryOverhead": "100m", "spark.executor.memoryOverheadFactor": "0.5"},
            "1124Mi",  # an explicit overhead wins over any factor
        ),
    ],
)
def test_the_memory_overhead_factor_and_minimum(properties: dict[str, str], memory: str) -> None:
    container = build(properties)["spec"]["containers"][0]
    assert container["resources"]["requests"]["memory"] == memory
    assert container["resources"]["limits"]["memory"] == memory


def test_the_api_accepts_such_a_pod(sim: KubeSim, operations: KubernetesPodOperations) -> None:
    operations.create(build(SPARK_POD_PROPERTIES))
    created = sim.pod("app-exec-3")
    assert created is not None
    assert created["metadata"]["annotations"] == {"example.com/owner": "exec 3 of app"}
    assert created["spec"]["schedulerName"] == "executor-scheduler"
