"""JSON as Spark writes it into a checkpoint, read strictly.

Python's ``json`` accepts more than Spark (Jackson) writes: ``NaN``, ``Infinity``
and numbers too large for a double (read as infinity, which ``int()`` then
refuses with ``OverflowError``), and it recurses once per nesting level, failing
with ``RecursionError`` on deep input. A damaged file must fail as a damaged file,
so :func:`loads` turns each of these into ``ValueError``, the error every reader
of checkpoint JSON already maps to its own "corrupt file" error.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"JSON constant {name} (not written by Spark)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"JSON number {text[:40]} does not fit a double")
    return value


def loads(text: str | bytes) -> Any:
    """Parse ``text`` as JSON with finite numbers.

    Raises:
        ValueError: malformed JSON (``json.JSONDecodeError``), ``NaN``/``Infinity``,
            a number beyond a double's range, or nesting too deep to parse.
    """
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        # json's scanner stops cleanly at the interpreter's recursion limit.
        raise ValueError("JSON nested too deeply") from None
