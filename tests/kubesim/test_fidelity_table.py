"""docs/kubesim.md's fidelity table lists every conformance test as collected today.

The table is written from a run on both servers (`tools/fidelity.py`); this check needs no server:
it compares the table's rows with the tests pytest collects, so a conformance test added without
a run on the real server (or one that starts a simulator of its own, unlisted) fails here.
"""

from __future__ import annotations

from types import ModuleType

from tests.generators import assert_not_stale, load_tool


def _fidelity() -> ModuleType:
    return load_tool("fidelity.py")


def test_the_table_lists_every_conformance_test() -> None:
    assert_not_stale("fidelity.py")


def test_the_check_sees_a_missing_row_a_stale_row_and_a_reasonless_one() -> None:
    fidelity = _fidelity()
    collected = [
        "tests/kubesim/test_conformance_api.py::test_a[kubesim]",
        "tests/kubesim/test_conformance_api.py::test_a[real]",
        "tests/kubesim/test_conformance_api.py::test_b[kubesim-x]",
        "tests/kubesim/test_conformance_api.py::test_c[kubesim]",
    ]
    rows = {
        ("api", "test_a"): ("pass", "pass", ""),
        ("api", "test_c"): ("pass", "n/a", ""),
        ("api", "test_gone"): ("pass", "pass", ""),
    }
    found = fidelity.problems(collected, rows)
    assert any("no row for api::test_b[x]" in p for p in found), found
    assert any("a row for api::test_gone" in p for p in found), found
    assert any("api::test_c runs on kubesim alone with no reason" in p for p in found), found
    rows[("api", "test_b[x]")] = ("pass", "n/a", "fault injection")
    rows[("api", "test_c")] = ("pass", "n/a", "fault injection")
    del rows[("api", "test_gone")]
    assert fidelity.problems(collected, rows) == []


def test_the_check_sees_a_test_that_starts_its_own_simulator() -> None:
    fidelity = _fidelity()
    path = "tests/kubesim/test_conformance_watch.py"
    # A watch test that builds its own KubeSim, collected without a server parameter as it was
    # before it said which server it runs on.
    found = fidelity.problems([f"{path}::test_bounded_event_window_expires_old_versions"], {})
    assert found == [
        f"{path}::test_bounded_event_window_expires_old_versions starts a KubeSim of its own: "
        "say which server it runs on (the sim fixture, or server_kind with kubesim_only)"
    ]
    # A pure unit test in a conformance module starts no server and needs no row.
    pure = "tests/kubesim/test_conformance_apply.py::test_owned_fields_and_fields_v1_follow_the"
    assert fidelity.problems([f"{pure}_api_servers_shape"], {}) == []
