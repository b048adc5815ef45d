"""Settings parsing and the API-error -> typed-error mapping (pure)."""

from __future__ import annotations

import pytest
import urllib3
from execpods.core import (
    ApiThrottled,
    ApiUnavailable,
    PodAdmissionRejected,
    PodConflict,
    PodForbidden,
    PodInvalid,
    PodNotFound,
    PodOperationError,
    SettingsError,
)
from execpods.k8s import (
    KubernetesSettings,
    ResourceExpired,
    error_from_status,
    is_known_key,
    map_error,
    parse_memory_mib,
)
from execpods.k8s.errors import status_event_error


def test_defaults() -> None:
    settings = KubernetesSettings()
    assert settings.namespace is None
    assert settings.watch_timeout == 300.0
    assert settings.request_timeout == 30.0
    assert (settings.backoff_initial, settings.backoff_max) == (0.5, 30.0)
    assert settings.executor_memory_mib == 1024
    assert settings.memory_overhead == 384
    assert settings.pod_memory_mib == 1408
    assert settings.cpu_request == "1"


def test_properties_are_read_with_spark_names() -> None:
    settings = KubernetesSettings.from_properties(
        {
            "spark.kubernetes.namespace": "spark",
            "spark.kubernetes.context": "prod",
            "spark.kubernetes.container.image": "spark:3",
            "spark.kubernetes.executor.container.image": "spark-exec:3",
            "spark.executor.cores": "4",
            "spark.kubernetes.executor.request.cores": "3500m",
            "spark.kubernetes.executor.limit.cores": "4",
            "spark.executor.memory": "8g",
            "execpods.kubernetes.watchTimeout": "1min",
            "spark.executorEnv.JAVA_HOME": "/opt/java",
            "spark.unrelated": "x",
        }
    )
    assert settings.namespace == "spark"
    assert settings.context == "prod"
    assert settings.image == "spark-exec:3"
    assert settings.cpu_request == "3500m"
    assert settings.limit_cores == "4"
    assert settings.executor_memory_mib == 8192
    assert settings.memory_overhead == 819  # 10% of 8 GiB, above the 384 MiB minimum
    assert settings.watch_timeout == 60.0
    assert dict(settings.executor_env) == {"JAVA_HOME": "/opt/java"}
    assert is_known_key("spark.executorEnv.X")
    assert not is_known_key("spark.unrelated")


def test_explicit_overhead_wins() -> None:
    settings = KubernetesSettings.from_properties({"spark.executor.memoryOverhead": "1g"})
    assert settings.memory_overhead == 1024


@pytest.mark.parametrize(
    ("text", "mib"), [("512m", 512), ("2g", 2048), ("2048", 2048), ("1t", 1048576), ("1024k", 1)]
)
def test_memory_sizes(text: str, mib: int) -> None:
    assert parse_memory_mib(text) == mib


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.executor.memory", "lots"),
        ("spark.executor.cores", "0"),
        ("spark.kubernetes.executor.request.cores", "two"),
        ("execpods.kubernetes.watchTimeout", "0s"),
        ("execpods.kubernetes.requestTimeout", "soon"),
        ("execpods.kubernetes.apiUrl", "localhost:6443"),
        ("execpods.kubernetes.backoffMax", "1ms"),
        ("spark.executorEnv.1BAD", "x"),
        ("spark.kubernetes.executor.podNamePrefix", "Not_Valid"),
        ("spark.executor.memoryOverhead", "0"),
    ],
)
def test_invalid_values_name_the_property(key: str, value: str) -> None:
    with pytest.raises(SettingsError, match=key.rsplit(".", maxsplit=1)[-1]):
        KubernetesSettings.from_properties({key: value})


def test_optional_settings_are_checked_when_set_directly() -> None:
    with pytest.raises(SettingsError, match=r"podNamePrefix='' is invalid: it must conform"):
        KubernetesSettings(pod_name_prefix="")
    with pytest.raises(SettingsError, match=r"apiUrl='localhost:6443' is invalid: it must be"):
        KubernetesSettings(api_url="localhost:6443")
    assert KubernetesSettings(pod_name_prefix="mine", api_url="http://127.0.0.1:1").api_url


@pytest.mark.parametrize(
    ("prefix", "valid"),
    [
        ("team.etl-nightly", True),  # issue 33 M7: dotted, as Spark allows
        ("a" * 237, True),
        ("a" * 238, False),  # 253 - len("-exec-") - 10 digits of an int id
        ("Team.etl", False),
        ("team..etl", False),
        ("team.-etl", False),
    ],
)
def test_the_pod_name_prefix_is_checked_as_spark_checks_it(prefix: str, valid: bool) -> None:
    """`Config.isValidExecutorPodNamePrefix` (Spark 4.3): a DNS-1123 subdomain whose length
    leaves room for `-exec-<id>` in 253 characters. 128638e refused any dot at start-up."""
    if valid:
        assert KubernetesSettings(pod_name_prefix=prefix).pod_name_prefix == prefix
    else:
        with pytest.raises(SettingsError, match="and the value length <= 237"):
            KubernetesSettings(pod_name_prefix=prefix)


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        (404, 'pods "x" not found', PodNotFound),
        (409, "already exists", PodConflict),
        (410, "too old resource version", ResourceExpired),
        (403, 'User "u" cannot create resource "pods"', PodForbidden),
        (403, "denied by admission webhook", PodAdmissionRejected),
        (403, "exceeded quota: compute", PodAdmissionRejected),
        (422, "exceeded quota: compute-resources", PodAdmissionRejected),
        (422, "spec.containers: Required value", PodInvalid),
        (429, "slow down", ApiThrottled),
        (500, "boom", ApiUnavailable),
        (503, "unavailable", ApiUnavailable),
        (0, "no answer", ApiUnavailable),
        (400, "bad request", PodOperationError),
    ],
)
def test_status_codes_map_to_typed_errors(
    code: int, message: str, expected: type[PodOperationError]
) -> None:
    error = error_from_status(code, message, what="create pod x", retry_after=3.0)
    assert type(error) is expected
    assert "create pod x" in str(error)
    assert message in str(error)
    if code:
        assert error.status == code


def test_throttled_carries_retry_after() -> None:
    error = error_from_status(429, "slow", what="list", retry_after=7.0)
    assert isinstance(error, ApiThrottled)
    assert error.retry_after == 7.0


def test_transport_failures_are_unavailable_and_outcome_unknown() -> None:
    error = map_error(urllib3.exceptions.ProtocolError("connection reset"), what="create pod x")
    assert isinstance(error, ApiUnavailable)
    assert error.outcome_unknown
    assert map_error(ValueError("a bug"), what="x") is None


def test_watch_error_events_map_like_responses() -> None:
    expired = status_event_error({"code": 410, "message": "too old"}, what="watch")
    assert isinstance(expired, ResourceExpired)
    throttled = status_event_error(
        {"code": 429, "message": "slow", "details": {"retryAfterSeconds": 4}}, what="watch"
    )
    assert isinstance(throttled, ApiThrottled)
    assert throttled.retry_after == 4.0
    assert isinstance(status_event_error("not a status", what="watch"), ApiUnavailable)
