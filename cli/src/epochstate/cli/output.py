"""How commands write to stdout: JSON documents, JSON lines, plain lines.

Guarantees, whatever the terminal width:

* :func:`print_document` writes exactly one JSON document: indented and
  highlighted on a terminal, one compact line when stdout is a pipe or file.
* :func:`print_json_line` writes one compact JSON object and a newline, then
  flushes (NDJSON: a reader sees each line as soon as it is written).
* :func:`print_line` writes one line of text as given, then flushes: no markup,
  no highlighting, no wrapping inserted by the program (a terminal may wrap it
  visually).

Nothing here truncates. Values are made JSON-able by :func:`jsonable`.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import sys
from decimal import Decimal
from typing import Any

from rich.console import Console

from epochstate.client.structs import Struct


def is_terminal() -> bool:
    """Whether stdout is a terminal (a person reads it) rather than a pipe or file.

    Deliberately ``isatty`` and not rich's guess, which ``FORCE_COLOR`` sways:
    colours may be forced in CI logs, the layout for programs must not change.
    """
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed
        return False


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types, following the protobuf JSON mapping where it
    has a rule: bytes as base64, non-finite floats as ``"NaN"``/``"Infinity"``/
    ``"-Infinity"``; decimals as strings (no precision lost); dates and timestamps
    as ISO 8601 strings (naive timestamps are UTC and get a ``Z``); map keys as strings; a map whose keys
    are not hashable as a list of ``[key, value]`` pairs (as the client gives it).

    A struct (:class:`~epochstate.client.structs.Struct`) is an object, field name ->
    value, in schema order, when its names are unique; when a name repeats (Spark's
    aggregation buffers: ``count``, ``sum``, ``count``) it is an array of
    ``[name, value]`` pairs in schema order, so that no field is lost. The form
    depends on the schema only, so every record of a store has the same one."""
    if isinstance(value, Struct):
        if value.has_repeated_names():
            return [[name, jsonable(v)] for name, v in value.fields]
        return {name: jsonable(v) for name, v in value.fields}
    if isinstance(value, dict):
        return {_key_text(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat() + ("Z" if value.tzinfo is None else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _key_text(key: Any) -> str:
    plain = jsonable(key)
    return plain if isinstance(plain, str) else json.dumps(plain, separators=(",", ":"))


def compact(value: Any) -> str:
    """``value`` as one line of JSON (after :func:`jsonable`)."""
    return json.dumps(jsonable(value), separators=(",", ":"), ensure_ascii=False)


def print_document(document: Any) -> None:
    """One JSON document on stdout (see the module docstring)."""
    if is_terminal():
        text = json.dumps(jsonable(document), ensure_ascii=False)
        Console().print_json(text, indent=2)
        return
    print_line(compact(document))


def print_json_line(record: Any) -> None:
    """One NDJSON line on stdout, flushed."""
    print_line(compact(record))


def print_line(text: str = "") -> None:
    """One line of plain text on stdout, flushed."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def one_line(message: str) -> str:
    """``message`` folded to one line: its lines joined with a space (a server's
    message may carry newlines, a stack of causes); empty lines dropped."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())
