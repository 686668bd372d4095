"""Log records as JSON lines (``epochstate daemon --log-format json``), for log collectors.

One object per line, with ``time`` (ISO 8601, UTC, milliseconds), ``level``,
``logger``, ``message`` (formatted with its arguments), ``thread`` and, when the
record carries one, ``exception`` (the formatted traceback). A message never
spans lines: newlines inside it are escaped by JSON.
"""

from __future__ import annotations

import datetime as dt
import json
import logging


class JsonLines(logging.Formatter):
    """Formats each record as one JSON object."""

    def format(self, record: logging.LogRecord) -> str:
        moment = dt.datetime.fromtimestamp(record.created, tz=dt.timezone.utc)
        line: dict[str, object] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)
