#!/usr/bin/env python3
"""Write docs/kubesim.md's fidelity table from a run of the conformance suite on both servers.

    .venv/bin/python tools/fidelity.py            # run the suite (kubesim and the real server)
    .venv/bin/python tools/fidelity.py --from R   # rebuild the table from a saved record R
    .venv/bin/python tools/fidelity.py --check    # the table lists today's tests (no server run)

Each conformance test is listed with its outcome on kubesim and on the real kube-apiserver; a test
that runs on kubesim alone carries its ``kubesim_only`` reason. The record is what
``tests/conftest.py`` writes when ``EXECPODS_FIDELITY_OUT`` names a file. ``--check`` (run by
``tests/kubesim/test_fidelity_table.py``) fails when a conformance test has no row, a row names a
test that is gone, a kubesim-only row has no reason, or a conformance test starts a simulator of
its own without saying which server it runs on (so it could pass on kubesim alone unlisted).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "kubesim.md"
BEGIN, END = "<!-- fidelity:begin -->", "<!-- fidelity:end -->"
MODULES = sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "kubesim").glob("test_conformance_*.py")
)
_ID = re.compile(r"^(?P<path>[^:]+)::(?P<name>[^\[]+)(?:\[(?P<params>.*)\])?$")
_MARK = {"passed": "pass", "failed": "FAIL", "skipped": "skip", "not run": "-"}


def _run() -> dict[str, dict[str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        env = {
            **os.environ,
            "EXECPODS_FIDELITY_OUT": str(out),
            "EXECPODS_REAL_TIER": "full",
            "EXECPODS_REAL_SERVER": "require",
        }
        pytest = ROOT / ".venv" / "bin" / "pytest"
        subprocess.run(
            [str(pytest), "-q", "-p", "no:cacheprovider", *MODULES], env=env, cwd=ROOT, check=False
        )
        record: dict[str, dict[str, str]] = json.loads(out.read_text())
        return record


def _row_key(nodeid: str) -> tuple[str, tuple[str, str]] | None:
    """(server, (module, test)) for a conformance test run on a server, else None."""
    m = _ID.match(nodeid)
    if m is None or "test_conformance_" not in m["path"]:
        return None
    params = (m["params"] or "").split("-", 1)
    server, rest = params[0], (params[1] if len(params) > 1 else "")
    if server not in ("kubesim", "real"):
        return None
    module = Path(m["path"]).stem.removeprefix("test_conformance_")
    return server, (module, m["name"] + (f"[{rest}]" if rest else ""))


def table(record: dict[str, dict[str, str]]) -> str:
    rows: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for nodeid, entry in record.items():
        found = _row_key(nodeid)
        if found is None:
            continue
        server, key = found
        row = rows[key]
        row[server] = _MARK.get(entry.get("outcome", "not run"), entry.get("outcome", "?"))
        if "kubesim_only" in entry:
            row["why"] = entry["kubesim_only"]
    lines = [
        "| module | test | kubesim | real kube-apiserver | why not both |",
        "|---|---|---|---|---|",
    ]
    both = alone = other = 0
    for (module, name), row in sorted(rows.items()):
        real = row.get("real", "n/a" if "why" in row else "-")
        if row.get("kubesim") == "pass" and real == "pass":
            both += 1
        elif row.get("kubesim") == "pass" and real == "n/a":
            alone += 1
        else:
            other += 1
        lines.append(
            f"| {module} | `{name}` | {row.get('kubesim', '-')} | {real} | {row.get('why', '')} |"
        )
    summary = (
        f"{both} pass on both servers; {alone} on kubesim alone, each with the reason it "
        "cannot run on a real server."
    )
    if other:
        summary += f" {other} pass on neither or fail on one: each is a kubesim bug to fix."
    return summary + "\n\n" + "\n".join(lines) + "\n"


def _collected() -> list[str]:
    """The node id of every test in the conformance modules, as pytest collects them."""
    pytest = ROOT / ".venv" / "bin" / "pytest"
    argv = [str(pytest), "-q", "-p", "no:cacheprovider", "--collect-only", *MODULES]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"collecting the conformance tests failed:\n{done.stdout}{done.stderr}")
    return [line.strip() for line in done.stdout.splitlines() if "::" in line]


def _doc_rows() -> dict[tuple[str, str], tuple[str, str, str]]:
    """The table's rows: (module, test) -> (kubesim, real, why)."""
    text = DOC.read_text()
    _, _, rest = text.partition(BEGIN)
    block, _, _ = rest.partition(END)
    rows: dict[tuple[str, str], tuple[str, str, str]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[1].startswith("`"):
            continue
        module, test, kubesim, real, why = cells
        rows[(module, test.strip("`"))] = (kubesim, real, why)
    return rows


def _starts_its_own_server(path: Path, names: set[str]) -> list[str]:
    """Test functions of ``names`` in ``path`` that construct a ``KubeSim`` themselves."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            calls = (n for n in ast.walk(node) if isinstance(n, ast.Call))
            if any(isinstance(c.func, ast.Name) and c.func.id == "KubeSim" for c in calls):
                found.append(node.name)
    return found


def problems(collected: list[str], rows: dict[tuple[str, str], tuple[str, str, str]]) -> list[str]:
    """What makes the table wrong for the tests ``collected`` (empty: it lists them all)."""
    found: list[str] = []
    expected: set[tuple[str, str]] = set()
    unparametrized: dict[str, set[str]] = defaultdict(set)
    for nodeid in collected:
        key = _row_key(nodeid)
        if key is not None:
            expected.add(key[1])
            continue
        m = _ID.match(nodeid)
        if m is not None:
            unparametrized[m["path"]].add(m["name"])
    found += [
        f"no row for {m}::{t} (run tools/fidelity.py)" for m, t in sorted(expected - set(rows))
    ]
    found += [f"a row for {m}::{t}, which is no test" for m, t in sorted(set(rows) - expected)]
    found += [
        f"{m}::{t} runs on kubesim alone with no reason (mark it kubesim_only(reason=...))"
        for (m, t), (_, real, why) in sorted(rows.items())
        if real != "pass" and not why
    ]
    for path, names in sorted(unparametrized.items()):
        found += [
            f"{path}::{name} starts a KubeSim of its own: say which server it runs on "
            "(the sim fixture, or server_kind with kubesim_only)"
            for name in _starts_its_own_server(ROOT / path, names)
        ]
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--from", dest="source", type=Path)
    parser.add_argument("--check", action="store_true", help="check the table lists every test")
    args = parser.parse_args()
    if args.check:
        found = problems(_collected(), _doc_rows())
        for problem in found:
            print(problem)
        if not found:
            print(f"{DOC.relative_to(ROOT)}'s fidelity table lists every conformance test")
        return 1 if found else 0
    record = json.loads(args.source.read_text()) if args.source else _run()
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"{DOC} has no {BEGIN} ... {END} block")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{BEGIN}\n{table(record)}{END}{tail}")
    print(f"wrote the fidelity table to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
