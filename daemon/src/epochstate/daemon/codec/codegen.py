"""The one way the daemon generates Python code per schema (row readers, transcoders,
``Record`` writers).

A generator fills a :class:`FunctionSource`: the statements of one function's body
(as lines with relative indentation) and the objects they refer to, bound under
names. :meth:`FunctionSource.compile` then guarantees:

* Every bound object is a default of a parameter after the positional ones, so the
  body reads it as a fast local, never as a global lookup (positional defaults:
  a call copies them from a tuple, where keyword-only ones cost a dict lookup each).
  Callers pass only the positional parameters.
* The source is compiled once per distinct text: the code object is cached by
  (label, source), and the source of a generator is a function of its schema. Each
  ``compile`` still makes a new function over its own bound objects. The cache
  lives as long as the process: one entry per distinct schema it has read.
* The code carries a stable file name, ``<codegen LABEL #HASH>`` (the hash is of
  the source), registered with :mod:`linecache`, so a traceback through generated
  code shows its lines.

Only the generator's own text goes into the source (names, integers, fixed byte
literals); names are checked to be identifiers, and objects are bound, never
written into the text, so nothing read from a checkpoint becomes code.
"""

from __future__ import annotations

import hashlib
import keyword
import linecache
import threading
from collections.abc import Callable, Iterable, Sequence
from types import CodeType
from typing import Any

_INDENT = "    "
_CODE: dict[tuple[str, str], tuple[str, CodeType]] = {}
_LOCK = threading.Lock()


def indented(lines: Iterable[str], levels: int = 1) -> list[str]:
    """``lines`` indented by ``levels`` steps, for nesting blocks in a body."""
    return [_INDENT * levels + line for line in lines]


def _check_name(name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{name!r} is not a name generated code can bind")


class FunctionSource:
    """One generated function: its parameters, its body's lines, the objects bound
    for it. Not thread-safe while being filled; :meth:`compile` is."""

    def __init__(self, label: str, name: str, params: Sequence[str]) -> None:
        """``label`` names the generator and schema in tracebacks; ``params`` are the
        positional parameters. Raises ValueError for a name that is not an identifier."""
        for n in (name, *params):
            _check_name(n)
        # The label becomes the code's file name: schemas come from checkpoint files, so a
        # field name may hold any character, and compile() refuses a NUL in a file name.
        self.label = "".join(c if c.isprintable() else repr(c)[1:-1] for c in label)
        self.name = name
        self.params = tuple(params)
        self.lines: list[str] = []
        self._bound: dict[str, Any] = {}
        self._counts: dict[str, int] = {}

    def bind(self, name: str, value: Any) -> str:
        """Bind ``value`` as ``name`` and return the name.

        Raises:
            ValueError: ``name`` is not an identifier, is a parameter, or is already
                bound to another object.
        """
        _check_name(name)
        if name in self.params:
            raise ValueError(f"{name!r} is a parameter of {self.name}")
        if name in self._bound and self._bound[name] is not value:
            raise ValueError(f"{name!r} is already bound in {self.name}")
        self._bound[name] = value
        return name

    def bind_all(self, values: dict[str, Any]) -> None:
        """:meth:`bind` every item of ``values``."""
        for name, value in values.items():
            self.bind(name, value)

    def fresh(self, hint: str, value: Any) -> str:
        """Bind ``value`` under a new name ``{hint}{n}`` (n counts per hint from 0) and
        return it: for objects a generator needs one of per field."""
        count = self._counts.get(hint, 0)
        while f"{hint}{count}" in self._bound:
            count += 1
        self._counts[hint] = count + 1
        return self.bind(f"{hint}{count}", value)

    def add(self, *lines: str) -> None:
        """Append lines to the body (indentation relative to the body)."""
        self.lines.extend(lines)

    def source(self) -> str:
        """The module text that defines the function."""
        defaults = ", ".join(f"{n}={n}" for n in self._bound)
        params = ", ".join([*self.params, *([defaults] if defaults else [])])
        body = self.lines or ["pass"]
        return f"def {self.name}({params}):\n" + "\n".join(indented(body)) + "\n"

    def compile(self) -> Callable[..., Any]:
        """The function, over the objects bound so far.

        Raises:
            SyntaxError: the generator wrote invalid code (a bug in the generator).
        """
        filename, code = _code(self.label, self.source())
        namespace = dict(self._bound)
        exec(code, namespace)
        function: Callable[..., Any] = namespace[self.name]
        assert function.__code__.co_filename == filename
        return function


def _code(label: str, source: str) -> tuple[str, CodeType]:
    key = (label, source)
    with _LOCK:
        cached = _CODE.get(key)
        if cached is not None:
            return cached
        digest = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()[:10]
        filename = f"<codegen {label} #{digest}>"
        code = compile(source, filename, "exec")
        # A size and no mtime: linecache.checkcache keeps the entry.
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        _CODE[key] = (filename, code)
        return filename, code


def cached_count() -> int:
    """How many distinct sources have been compiled (for tests and diagnostics)."""
    with _LOCK:
        return len(_CODE)
