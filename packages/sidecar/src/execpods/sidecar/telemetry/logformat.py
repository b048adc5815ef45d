"""Structured logs: one JSON object per line (`--log-format json`), for log pipelines.

Every line has `ts` (RFC 3339 UTC), `level`, `logger` and `message`; `app_id` once the sidecar
knows its application; and `executor_id` and `reason` when the log call names them (passed as
`extra={"executor_id": ..., "reason": ...}`); `source` on gRPC core's own lines, which
`stderr_as_json` turns into records too. A failure's traceback goes in `exception`. Secrets
never reach a log call in the first place (see security.py), so the formatter filters nothing.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping

FIELDS = ("app_id", "executor_id", "reason", "source")
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
        stamps = [f for f in handler.filters if isinstance(f, AppIdFilter)]
        for stamp in stamps:
            stamp.app_id = app_id
        if not stamps:
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


_NATIVE_LINE = re.compile(
    r"^(?P<severity>[IWEF])\d{4} [\d:.]+\s+\d+ (?P<source>[^\]]+)\] (?P<text>.*)$"
)
"""gRPC core's own lines (absl's format): `E1125 20:05:36.624451   27560 file.cc:2563] text`."""
_SEVERITY = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
NATIVE_LOGGER = "grpc.core"
"""The logger of gRPC core's own lines (absl's format)."""
STDERR_LOGGER = "stderr"
"""The logger of any other line written straight to file 2 (a stray print, a warning)."""


@contextlib.contextmanager
def stderr_as_json() -> Iterator[None]:
    """While active, whatever is written to file descriptor 2 becomes JSON log records.

    gRPC core writes its own lines (a failed TLS handshake, say) to file 2 from C++, past
    Python's logging, which breaks a JSON log stream. Here file 2 becomes a pipe: the logging
    handlers write to the real stderr directly, and a thread turns each line arriving on the pipe
    into a record: of the `grpc.core` logger for gRPC core's lines (absl's severity letter giving
    its level), of the `stderr` logger (WARNING) for anything else, so every line stays one JSON
    object and the usual level filter applies to it.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    real = open(saved, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
    handlers = logging.getLogger().handlers
    previous = [getattr(h, "stream", None) for h in handlers]
    for handler in handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(real)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    reader = threading.Thread(target=_relay, args=(read_end,), name="stderr-json", daemon=True)
    reader.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last write end: the reader sees its end
        reader.join(timeout=5)
        for handler, stream in zip(handlers, previous, strict=True):
            if isinstance(handler, logging.StreamHandler) and stream is not None:
                handler.setStream(stream)
        real.close()
        os.close(saved)


def _relay(read_end: int) -> None:
    native, stray = logging.getLogger(NATIVE_LOGGER), logging.getLogger(STDERR_LOGGER)
    with open(read_end, encoding="utf-8", errors="replace") as pipe:
        for raw in pipe:
            line = raw.rstrip("\n")
            if not line.strip():
                continue
            match = _NATIVE_LINE.match(line)
            if match is None:
                stray.warning("%s", line)
            else:
                level = _SEVERITY[match["severity"]]
                native.log(level, "%s", match["text"], extra={"source": match["source"]})
