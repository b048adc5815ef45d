"""What the sidecar's last line says when stopping could not delete the executor pods."""

from __future__ import annotations

from execpods.core.backend import ShutdownReport


def test_a_refused_stop_says_what_failed_without_claiming_the_api_was_silent() -> None:
    """Under a 401 the API answered every call, with a refusal: the line must not say it did
    not answer. One attempt (a server that never answered) is one attempt."""
    refused = ShutdownReport(
        complete=False, attempts=9, error="delete pods failed: 401 Unauthorized", left=None
    )
    text = refused.describe("a401")
    assert "in 9 attempts (delete pods failed: 401 Unauthorized)" in text
    assert "did not answer" not in text
    assert text.endswith("an unknown number of executor pods (listing them failed too) may be left")
    once = ShutdownReport(complete=False, attempts=1, error="never answered", left=("1", "2"))
    assert "in 1 attempt (never answered); 2 executor pods (" in once.describe("lost")


def test_a_complete_stop_counts_the_deleted_pods() -> None:
    report = ShutdownReport(complete=True, deleted=3, attempts=1)
    assert report.describe("app") == "deleted the 3 executor pods of application app"
