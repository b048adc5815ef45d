"""Real Spark 4.3 through the plugin to a secured sidecar, and the sidecar's failures in Spark.

The sidecar serves TLS with a bearer token (then mutual TLS with a token): Spark, given the CA,
its client certificate and the token file under `spark.execpods.sidecar.*`, reaches its target
and cleans up; with a wrong token its start fails naming the property. When the sidecar's
failure limit (the driver's, sent by the plugin) is hit, Spark's application ends as Spark's own
lifecycle manager ends it: exit code 11 (EXCEED_MAX_EXECUTOR_FAILURES) with the sidecar's reason
in the driver log, and the refused creates appear there at WARN.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from execpods.devtools.spark import SparkDriver
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.sidecar.test_security import TOKEN, Pki
from tests.spark.support import (
    PLUGIN_MARKS,
    executor_watch,
    plugin_conf,
    plugin_sidecar,
    running,
)

pytestmark = PLUGIN_MARKS

APP = "spark-plugin-test"
EXECUTORS = 2


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    cfg = ClusterConfig(nodes=2, pods_per_node=4, start_latency=0.2, start_jitter=0.1, seed=7)
    with KubeSim(cluster=cfg) as s:
        yield s


def _sidecar(sim: KubeSim, **conf: str) -> EmbeddedSidecar:
    return plugin_sidecar(sim, APP, **conf)


def _client_files(pki: Pki, name: str) -> tuple[Path, Path]:
    """A client certificate and its key as PKCS#8 (what gRPC Java reads; cert-manager writes it
    with privateKey.encoding: PKCS8)."""
    from cryptography.hazmat.primitives import serialization

    issued = pki.ca.issue_cert(name, common_name=name)
    cert, key = pki.folder / f"{name}.pem", pki.folder / f"{name}.key"
    private = serialization.load_pem_private_key(issued.private_key_pem.bytes(), password=None)
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    for index, blob in enumerate(issued.cert_chain_pems):
        blob.write_to_path(str(cert), append=index > 0)
    return cert, key


def _reaches_target_and_cleans_up(sim: KubeSim, conf: dict[str, str]) -> None:
    watch = executor_watch(sim, APP)
    driver = SparkDriver(f"k8s://{sim.url}", executors=EXECUTORS, conf=conf)
    try:
        driver.start()
        assert watch.wait_for(lambda ph: running(ph) == EXECUTORS, 60), watch.phases
        assert driver.stop() == 0
        assert watch.wait_for(lambda ph: not ph, 30), watch.phases
    finally:
        driver.stop()
        watch.close()
    assert sim.pods() == []
    assert sim.objects("configmaps") == []


def _refused_start(
    sim: KubeSim, jar: Path, sidecar_conf: dict[str, str], spark_conf: dict[str, str]
) -> tuple[str, list[str]]:
    """Start Spark against a sidecar that refuses it: the start fails within the deadline and no
    pod is left. Returns what the driver said, whole and its last lines (for messages)."""
    with _sidecar(sim, **sidecar_conf) as sidecar:
        spark = {
            **plugin_conf(jar, sidecar.address, APP),
            **spark_conf,
            "spark.execpods.sidecar.deadlineMs": "5000",
        }
        driver = SparkDriver(f"k8s://{sim.url}", executors=1, conf=spark)
        with pytest.raises(RuntimeError):
            driver.start(timeout=120)
        driver.stop()
    assert sim.pods() == []
    return "\n".join(driver.stderr_tail), driver.stderr_tail[-20:]


@pytest.mark.parametrize("mutual", [False, True], ids=["tls-token", "mtls-token"])
def test_spark_allocates_through_a_sidecar_on_tls_with_a_token(
    sim: KubeSim, plugin_jar: Path, pki: Pki, token_file: Path, mutual: bool
) -> None:
    conf = {**pki.tls_conf(mutual=mutual), "execpods.sidecar.auth.tokenFile": str(token_file)}
    if mutual:
        conf["execpods.sidecar.tls.allowedClients"] = "spark-driver"
    with _sidecar(sim, **conf) as sidecar:
        spark = {
            **plugin_conf(plugin_jar, sidecar.address, APP),
            "spark.execpods.sidecar.tls.caFile": str(pki.ca_file),
            "spark.execpods.sidecar.auth.tokenFile": str(token_file),
        }
        if mutual:
            cert, key = _client_files(pki, "spark-driver")
            spark["spark.execpods.sidecar.tls.certFile"] = str(cert)
            spark["spark.execpods.sidecar.tls.keyFile"] = str(key)
        _reaches_target_and_cleans_up(sim, spark)


def test_the_plugin_reads_a_rotated_ca_and_reaches_a_sidecar_with_a_new_certificate(
    sim: KubeSim, plugin_jar: Path, pki: Pki, tmp_path: Path
) -> None:
    """cert-manager rotates the CA and the sidecar's certificate: the plugin reads its CA file
    again (spark.execpods.sidecar.tls.reloadSeconds), so when the sidecar comes back with a
    certificate only the new CA signed, the next target reaches it without a driver restart."""
    ca_file = tmp_path / "driver-ca.pem"
    ca_file.write_bytes(pki.ca_file.read_bytes())
    first = _sidecar(sim, **pki.tls_conf())
    first.start()
    port = first.address.rsplit(":", 1)[1]
    watch = executor_watch(sim, APP)
    spark = {
        **plugin_conf(plugin_jar, first.address, APP),
        "spark.execpods.sidecar.tls.caFile": str(ca_file),
        "spark.execpods.sidecar.tls.reloadSeconds": "1",
    }
    driver = SparkDriver(f"k8s://{sim.url}", executors=1, conf=spark)
    second: EmbeddedSidecar | None = None
    try:
        driver.start()
        assert watch.wait_for(lambda ph: running(ph) == 1, 60), watch.phases
        first.stop()  # deletes its executor
        (tmp_path / "next").mkdir()
        rotated = Pki(tmp_path / "next")  # a new CA, and a server certificate it signed
        ca_file.write_bytes(rotated.ca_file.read_bytes())
        time.sleep(2)  # the plugin's reload period (1 s), not a timing assertion
        second = _sidecar(
            sim, **rotated.tls_conf(), **{"execpods.sidecar.listen": f"127.0.0.1:{port}"}
        )
        second.start()
        driver.set_total(2, timeout=60)
        assert second.runtime.backend.targets()[0] == 2
        assert watch.wait_for(lambda ph: running(ph) == 2, 60), watch.phases
    finally:
        driver.stop()
        watch.close()
        if second is not None:
            second.stop()


def test_a_wrong_token_fails_spark_at_start_naming_the_property(
    sim: KubeSim, plugin_jar: Path, pki: Pki, token_file: Path, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-sidecar-token-0000\n", encoding="utf-8")
    conf = {**pki.tls_conf(), "execpods.sidecar.auth.tokenFile": str(token_file)}
    spark = {
        "spark.execpods.sidecar.tls.caFile": str(pki.ca_file),
        "spark.execpods.sidecar.auth.tokenFile": str(wrong),
    }
    said, tail = _refused_start(sim, plugin_jar, conf, spark)
    assert "refused the call as unauthenticated" in said, tail
    assert f"spark.execpods.sidecar.auth.tokenFile={wrong} is not the sidecar's" in said
    assert TOKEN not in said


def test_a_sidecar_certificate_the_ca_did_not_sign_fails_spark_naming_the_ca_property(
    sim: KubeSim, plugin_jar: Path, pki: Pki, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger-ca.pem"
    stranger.write_bytes(trustme.CA().cert_pem.bytes())
    spark = {"spark.execpods.sidecar.tls.caFile": str(stranger)}
    said, tail = _refused_start(sim, plugin_jar, pki.tls_conf(), spark)
    assert "the TLS handshake failed" in said, tail
    assert "spark.execpods.sidecar.tls.caFile" in said


def test_plaintext_to_a_tls_sidecar_fails_spark_naming_the_tls_property(
    sim: KubeSim, plugin_jar: Path, pki: Pki
) -> None:
    said, tail = _refused_start(sim, plugin_jar, pki.tls_conf(), {})
    assert "is not reachable over plaintext" in said, tail
    assert "spark.execpods.sidecar.tls.enabled=true" in said


def test_a_client_certificate_not_allowed_fails_spark_naming_the_property(
    sim: KubeSim, plugin_jar: Path, pki: Pki
) -> None:
    """Mutual TLS where the sidecar allows another client: PERMISSION_DENIED, told apart from
    an unreachable sidecar or a refused token, naming the certificate property."""
    conf = {**pki.tls_conf(mutual=True), "execpods.sidecar.tls.allowedClients": "someone-else"}
    cert, key = _client_files(pki, "spark-driver")
    spark = {
        "spark.execpods.sidecar.tls.caFile": str(pki.ca_file),
        "spark.execpods.sidecar.tls.certFile": str(cert),
        "spark.execpods.sidecar.tls.keyFile": str(key),
    }
    said, tail = _refused_start(sim, plugin_jar, conf, spark)
    assert "refused this driver's client certificate" in said, tail
    assert "spark.execpods.sidecar.tls.certFile" in said
    assert "spark-driver" in said  # the sidecar names the certificate it refused


def test_the_sidecars_failure_limit_ends_spark_with_its_reason(
    sim: KubeSim, plugin_jar: Path
) -> None:
    """Every create is refused; the driver's limit (spark.executor.maxNumFailures=2, sent by the
    plugin; the sidecar's own would be 3) is exceeded after three refusals: Spark exits with 11
    within a batch delay plus a few seconds, never hanging, the sidecar's reason in its log."""
    sim.reject_creates(403, count=1000, message="denied by the test's admission webhook")
    with _sidecar(sim) as sidecar:
        spark = {
            **plugin_conf(plugin_jar, sidecar.address, APP),
            "spark.executor.maxNumFailures": "2",
            "spark.kubernetes.allocation.batch.size": "1",
        }
        failed_at: list[float] = []
        sidecar.runtime.backend.open_stream(
            1.0,
            on_snapshots=lambda _: None,
            on_removal=lambda _: None,
            on_application_failure=lambda _: failed_at.append(time.monotonic()),
        )
        driver = SparkDriver(f"k8s://{sim.url}", executors=4, conf=spark)
        try:
            # The refusals come at the first target, while the SparkContext starts: the driver
            # may exit before it reports itself started.
            with contextlib.suppress(RuntimeError):
                driver.start()
            code = driver.wait_exit(60)
            ended = time.monotonic()
        finally:
            driver.stop()
        assert sidecar.runtime.backend.failure_limit() == (2, None)
    said = "\n".join(driver.stderr_tail)
    # The JVM exits with 11, as Spark's own sys.exit(EXCEED_MAX_EXECUTOR_FAILURES) does; this
    # driver is a pyspark process, which then fails on its lost gateway (exit code 1).
    assert code not in (None, 0), driver.stderr_tail[-30:]
    assert failed_at, "the sidecar never failed the application"
    # From the sidecar's failure to the driver's end: the stream's batch (1 s) and the JVM's
    # shutdown hooks, within a few seconds, never a hang.
    assert ended - failed_at[0] < 10, ended - failed_at[0]
    assert "Max number of executor failures (2) reached" in said, driver.stderr_tail[-30:]
    assert "the sidecar failed application" in said
    assert "WARN" in said
    assert "create refused" in said
    assert "denied by the test's admission webhook" in said
