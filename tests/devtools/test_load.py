"""The load command, in miniature: the same three processes and figures, a few seconds long.

The 60-second run with 1,000 executors is a benchmark (docs/benchmarks.md), never a test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from execpods.devtools.load import histogram_quantile, main, rss_timeline


def test_histogram_quantile_interpolates_within_the_bucket() -> None:
    buckets = [(0.01, 50.0), (0.1, 90.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert histogram_quantile(buckets, 0.5) == pytest.approx(0.01)
    assert histogram_quantile(buckets, 0.7) == pytest.approx(0.01 + 0.09 * 0.5)
    assert histogram_quantile(buckets, 0.99) == pytest.approx(0.1 + 0.9 * 0.9)
    assert histogram_quantile([(1.0, 0.0), (float("inf"), 0.0)], 0.99) == 0.0


def test_the_rss_timeline_shows_the_sample_nearest_each_tenth_and_the_end() -> None:
    samples = [(float(t), 100.0 + t) for t in range(0, 20)]
    line = rss_timeline(samples, end=150.0, elapsed=20.0)
    assert line.split(", ") == [f"{t} s {100 + t}" for t in range(0, 20, 2)] + ["20 s 150 MiB"]
    assert rss_timeline([], end=99.0, elapsed=5.0) == "5 s 99 MiB"


@pytest.mark.timeout(120)
def test_a_short_load_run_prints_every_figure_with_no_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--duration", "2", "--executors", "20", "--subscribers", "5", "--rate", "50"]
    assert main([*argv, "--failure-after", "5", "--logs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "errors: 0" in out
    sent = re.search(r"RequestTotal: (\d+) ok of (\d+) sent", out)
    assert sent is not None
    assert sent.group(1) == sent.group(2)
    assert int(sent.group(2)) >= 90  # about 50/s for 2 s
    assert re.search(r"p50 [\d.]+ ms, p99 [\d.]+ ms", out)
    assert re.search(r"stream lag .*p99 [\d.]+ ms; [1-9]\d* messages received", out)
    rss = re.search(r"sidecar RSS: start (\d+) MiB, end (\d+) MiB, peak (\d+) MiB", out)
    assert rss is not None
    assert 0 < int(rss.group(1)) <= int(rss.group(3))
    assert re.search(r"sidecar RSS over the run: 0 s \d+, .* s \d+ MiB", out)
