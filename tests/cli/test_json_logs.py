"""``--log-format json``: one JSON object per record, whatever the message holds."""

from __future__ import annotations

import json
import logging
import sys

from epochstate.cli.json_logs import JsonLines


def record(message: str, *args: object, exc_info: bool = False) -> logging.LogRecord:
    info = sys.exc_info() if exc_info else None
    made = logging.LogRecord("epochstate.test", logging.WARNING, __file__, 1, message, args, info)
    made.created = 1_795_000_000.5
    return made


def test_a_record_is_one_line_of_json() -> None:
    line = JsonLines().format(record("job %s: epoch %d\nnext line", "orders", 7))
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2026-11-18T11:06:40.500Z",
        "level": "WARNING",
        "logger": "epochstate.test",
        "message": "job orders: epoch 7\nnext line",
        "thread": "MainThread",
    }


def test_an_exception_goes_in_its_own_field() -> None:
    try:
        raise ValueError("broken")
    except ValueError:
        line = JsonLines().format(record("failed", exc_info=True))
    parsed = json.loads(line)
    assert parsed["message"] == "failed"
    assert parsed["exception"].startswith("Traceback") and "ValueError: broken" in parsed["exception"]
