#!/usr/bin/env python3
"""Write docs/kubesim.md's fidelity table from a run of the conformance suite on both servers.

    .venv/bin/python tools/fidelity.py            # run the suite (kubesim and the real server)
    .venv/bin/python tools/fidelity.py --from R   # rebuild the table from a saved record R

Each conformance test is listed with its outcome on kubesim and on the real kube-apiserver; a test
that runs on kubesim alone carries its ``kubesim_only`` reason. The record is what
``tests/conftest.py`` writes when ``EXECPODS_FIDELITY_OUT`` names a file.
"""

from __future__ import annotations

import argparse
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


def table(record: dict[str, dict[str, str]]) -> str:
    rows: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for nodeid, entry in record.items():
        m = _ID.match(nodeid)
        if m is None or "test_conformance_" not in m["path"]:
            continue
        params = (m["params"] or "").split("-", 1)
        server, rest = params[0], (params[1] if len(params) > 1 else "")
        if server not in ("kubesim", "real"):
            continue
        key = (
            Path(m["path"]).stem.removeprefix("test_conformance_"),
            m["name"] + (f"[{rest}]" if rest else ""),
        )
        row = rows[key]
        row[server] = _MARK.get(entry.get("outcome", "not run"), entry.get("outcome", "?"))
        if "kubesim_only" in entry:
            row["why"] = entry["kubesim_only"]
    lines = [
        "| module | test | kubesim | real kube-apiserver | why not both |",
        "|---|---|---|---|---|",
    ]
    both = alone = 0
    for (module, name), row in sorted(rows.items()):
        real = row.get("real", "n/a" if "why" in row else "-")
        if row.get("kubesim") == "pass" and real == "pass":
            both += 1
        elif row.get("kubesim") == "pass":
            alone += 1
        lines.append(
            f"| {module} | `{name}` | {row.get('kubesim', '-')} | {real} | {row.get('why', '')} |"
        )
    summary = (
        f"{both} pass on both servers; {alone} on kubesim alone, each with the reason it "
        "cannot run on a real server."
    )
    return summary + "\n\n" + "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--from", dest="source", type=Path)
    args = parser.parse_args()
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
