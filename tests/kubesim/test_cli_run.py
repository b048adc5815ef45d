"""``kubesim -- COMMAND``: run a driver, a test or spark-submit against a fresh simulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_kubesim_runs_a_command_against_itself_and_reports_what_it_left() -> None:
    """``kubesim -- COMMAND`` (docs/spark.md): the command gets the URL, its exit code is
    kubesim's, and ``--expect-clean`` turns objects left behind into exit code 3."""
    kubesim = str(Path(sys.executable).parent / "kubesim")
    create = (
        "import json, os, urllib.request as u; "
        "req = u.Request(os.environ['KUBESIM_URL'] + '/api/v1/namespaces/default/configmaps', "
        "data=json.dumps({'metadata': {'name': 'left-behind'}}).encode(), method='POST', "
        "headers={'Content-Type': 'application/json'}); u.urlopen(req).read(); "
        "assert os.environ['KUBESIM_MASTER'] == 'k8s://' + os.environ['KUBESIM_URL']"
    )
    argv = [kubesim, "--expect-clean", "--", sys.executable, "-c", create]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3, done.stderr
    summary = json.loads(done.stderr.strip().splitlines()[-1])
    assert summary["left"]["configmaps"] == ["left-behind"]
    assert summary["requests"] == {"create": 1}
    failing = [kubesim, "--", sys.executable, "-c", "raise SystemExit(7)"]
    done = subprocess.run(failing, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 7
    url_arg = [kubesim, "--", sys.executable, "-c", "import sys; print(sys.argv[1])", "{master}"]
    done = subprocess.run(url_arg, capture_output=True, text=True, timeout=60, check=False)
    url = done.stdout.splitlines()[0]
    assert done.stdout.splitlines()[-1] == f"k8s://{url}"
