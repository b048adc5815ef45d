"""Structured logs: one JSON object per line (`--log-format json`), for log pipelines.

Every line has `ts` (RFC 3339 UTC), `level`, `logger` and `message`; `app_id` once the sidecar
knows its application; and `executor_id` and `reason` when the log call names them (passed as
`extra={"executor_id": ..., "reason": ...}`). A failure's traceback goes in `exception`. Secrets
never reach a log call in the first place (see security.py), so the formatter filters nothing.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Mapping

FIELDS = ("app_id", "executor_id", "reason")
LOG_FORMAT_ENV = "EXECPODS_LOG_FORMAT"


class JsonFormatter(logging.Formatter):
    """A log record as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        line: dict[str, object] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class AppIdFilter(logging.Filter):
    """Stamps every record with the application id (unless the call gave its own)."""

    def __init__(self, app_id: str) -> None:
        super().__init__()
        self.app_id = app_id

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "app_id", None) is None:
            record.app_id = self.app_id
        return True


def stamp_app_id(app_id: str) -> None:
    """Add the app id to every record the root logger's handlers write from now on."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, AppIdFilter) for f in handler.filters):
            handler.addFilter(AppIdFilter(app_id))


def configure_log_format(style: str | None, environ: Mapping[str, str]) -> bool:
    """Switch the root logger's handlers to `style` (else $EXECPODS_LOG_FORMAT, else text).

    Returns False for a style that is neither `text` nor `json`.
    """
    chosen = (style or environ.get(LOG_FORMAT_ENV) or "text").lower()
    if chosen not in ("text", "json"):
        return False
    if chosen == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
    return True
