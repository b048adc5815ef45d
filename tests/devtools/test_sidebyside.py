"""The side-by-side harness's own logic, without Spark: what it records from a request log, how
it pairs two runs, and how the allow-list explains differences (the real runs are in
tests/spark/test_side_by_side.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from execpods.devtools.sidebyside.compare import compare, load_allowlist
from execpods.devtools.sidebyside.record import record_run
from execpods.kubesim import RequestRecord

SPARK = "fabric8-kubernetes-client/7.6.1"
SIDECAR = "execpods-sidecar/app"
PODS = "/api/v1/namespaces/default/pods"


def _pod(executor_id: int, *, port: int, cores: str = "2") -> bytes:
    return json.dumps(
        {
            "metadata": {
                "name": f"app-exec-{executor_id}",
                "labels": {"spark-exec-id": str(executor_id), "spark-app-selector": "app"},
            },
            "spec": {
                "hostname": f"app-exec-{executor_id}",
                "containers": [
                    {
                        "name": "spark-kubernetes-executor",
                        "env": [
                            {"name": "SPARK_EXECUTOR_ID", "value": str(executor_id)},
                            {"name": "SPARK_EXECUTOR_CORES", "value": cores},
                            {
                                "name": "SPARK_DRIVER_URL",
                                "value": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}",
                            },
                            {
                                "name": "SPARK_LOCAL_DIRS",
                                "value": f"/var/data/spark-{executor_id:08d}-0000-0000-0000-"
                                f"{port:012d}",
                            },
                        ],
                    }
                ],
            },
        }
    ).encode()


def _record(
    verb: str, *, at: float, agent: str = SPARK, path: str = PODS, body: bytes | None = None,
    query: dict[str, str] | None = None, status: int = 200,
) -> RequestRecord:  # fmt: skip
    method = {"create": "POST", "delete": "DELETE", "deletecollection": "DELETE"}.get(verb, "GET")
    if verb == "patch":
        method = "PATCH"
    return RequestRecord(
        method=method, path=path, query=query or {}, status=status, verb=verb, duration=0.0,
        at=at, user_agent=agent, body=body,
    )  # fmt: skip


def _run(agent: str, *, port: int, ids: tuple[int, int], cores: str = "2") -> list[RequestRecord]:
    """Two executors created in one batch (the second id's create served first), then one
    deleted by a selector naming its id."""
    first, second = ids
    return [
        _record("create", at=1.0, agent=agent, body=_pod(second, port=port), status=201),
        _record(
            "create", at=1.1, agent=agent, body=_pod(first, port=port, cores=cores), status=201
        ),
        _record(
            "deletecollection", at=2.5, agent=agent,
            query={"labelSelector": f"spark-app-selector=app,spark-exec-id in ({first})"},
        ),
        _record("list", at=1.2, agent=SIDECAR, query={"labelSelector": "spark-role=executor"}),
    ]  # fmt: skip


STEPS = [("start", 0.0), ("kill", 2.0)]


def test_a_run_is_recorded_pod_by_pod_with_run_to_run_values_normalized() -> None:
    recording = record_run("direct", _run(SPARK, port=40001, ids=(1, 2)), STEPS)
    first, second = recording.pods
    assert (first.ordinal, first.executor_id, second.executor_id) == (1, 1, 2), "by id in a step"
    assert first.fields["metadata.name"] == '"app-exec-{id}"'
    assert first.fields["spec.hostname"] == '"app-exec-{id}"'
    env = "spec.containers[spark-kubernetes-executor].env"
    assert first.fields[f"{env}[SPARK_DRIVER_URL].value"].endswith(':{port}"')
    assert first.fields[f"{env}[SPARK_LOCAL_DIRS].value"] == '"/var/data/spark-{uuid}"'
    assert first.fields[f"{env}[SPARK_EXECUTOR_ID].value"] == '"{id}"'
    keys = [(c.step, c.key()) for c in recording.calls if c.verb == "deletecollection"]
    assert keys == [
        ("kill", "deletecollection pod labels=spark-app-selector=app,spark-exec-id in (#1) 200")
    ]


def test_two_runs_that_agree_differ_in_nothing_but_what_the_allow_list_explains() -> None:
    direct = record_run("direct", _run(SPARK, port=40001, ids=(1, 2)), STEPS)
    plugin = record_run("plugin", _run(SIDECAR, port=40777, ids=(1, 2)), STEPS)
    result = compare("s", direct, plugin, [])
    assert result.fields_compared == 2 * len(direct.pods[0].fields) + 4
    assert result.calls_compared == 8
    assert result.unexplained == [], result.report()


def test_a_field_and_a_call_that_differ_are_reported_unless_allowed() -> None:
    direct = record_run("direct", _run(SPARK, port=1, ids=(1, 2)), STEPS)
    plugin_records = _run(SIDECAR, port=2, ids=(1, 2), cores="1")
    plugin_records.append(
        _record(
            "patch",
            at=2.6,
            agent=SIDECAR,
            path=f"{PODS}/app-exec-2",
            body=b'{"metadata": {"labels": {"gone": "true"}}}',
        )
    )
    plugin = record_run("plugin", plugin_records, STEPS)
    result = compare("s", direct, plugin, [])
    described = [d.describe() for d in result.unexplained]
    assert described == [
        "pod #1 (start) spec.containers[spark-kubernetes-executor].env[SPARK_EXECUTOR_CORES]"
        '.value: direct="2" plugin="1"',
        '[kill] only plugin (sidecar): patch pod pod #2 body={"metadata": {"labels": '
        '{"gone": "true"}}} 200',
    ]


def test_the_allow_list_explains_differences_by_pattern_and_gives_each_a_reason(
    tmp_path: Path,
) -> None:
    allowlist = tmp_path / "allow.toml"
    allowlist.write_text(
        '[[call]]\nwho = "sidecar"\nside = "plugin"\npattern = "patch pod *"\n'
        'reason = "marks of its own"\n'
        '[[field]]\nscenarios = "other"\npattern = "*SPARK_EXECUTOR_CORES*"\nreason = "not here"\n'
    )
    direct = record_run("direct", _run(SPARK, port=1, ids=(1, 2)), STEPS)
    records = _run(SIDECAR, port=2, ids=(1, 2), cores="1")
    records.append(_record("patch", at=2.6, agent=SIDECAR, path=f"{PODS}/app-exec-2", body=b"{}"))
    result = compare("s", direct, record_run("plugin", records, STEPS), load_allowlist(allowlist))
    assert [d.allowed for d in result.allowed] == ["marks of its own"]
    assert len(result.unexplained) == 1, "the field entry is for another scenario"
    allowlist.write_text('[[field]]\npattern = "x"\nreason = ""\n')
    with pytest.raises(ValueError, match="gives no reason"):
        load_allowlist(allowlist)


def test_spark_s_own_calls_through_the_plugin_are_not_who_made_a_surplus() -> None:
    """Through the plugin Spark still reads the driver pod once, as its own allocator does; the
    sidecar's reads of it are the surplus, and are attributed to it."""
    driver = f"{PODS}/app-driver"
    direct = record_run("direct", [_record("get", at=0.5, path=driver)], STEPS)
    plugin = record_run(
        "plugin",
        [_record("get", at=0.5, path=driver), _record("get", at=0.6, agent=SIDECAR, path=driver)],
        STEPS,
    )
    (surplus,) = compare("s", direct, plugin, []).unexplained
    assert (surplus.who, surplus.side) == ("sidecar", "plugin")


def test_the_repository_s_allow_list_loads_and_every_entry_says_why() -> None:
    entries = load_allowlist()
    assert entries
    assert all(len(entry.reason.split()) >= 8 for entry in entries), "a reason, not a label"
