"""``Struct``: a struct value as the client returns it, every field kept, in schema order.

Spark's schemas may repeat a field name: an aggregation's state buffer holds one
``count`` per ``count()`` and ``avg()``, and ``groupBy(...).agg(count(...), avg(...))``
stores ``struct<count, sum, count>``. A ``dict`` keeps one of them; a
:class:`Struct` keeps them all.

A ``Struct`` is a ``tuple`` of the field values (so it compares, hashes, unpacks,
slices and pickles as one) that also knows the field names:

>>> s = Struct(("count", "sum", "count"), (3, 9.5, 2))
>>> s[0], s[-1], tuple(s)
(3, 2, (3, 9.5, 2))
>>> s == (3, 9.5, 2)
True
>>> s["sum"]
9.5
>>> s.getall("count")
(3, 2)
>>> s.fields
(('count', 3), ('sum', 9.5), ('count', 2))

Name access is by ``s[name]``, never by attribute: ``count`` and ``index`` are
``tuple`` methods, and exactly the names aggregation buffers use. A name that
occurs once gives its value; a repeated name raises :class:`AmbiguousField` (a
``KeyError``) naming its positions, so no value is ever chosen silently; an
unknown name raises ``KeyError``. :meth:`Struct.asdict` refuses repeated names
the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, SupportsIndex, overload


class AmbiguousField(KeyError):
    """A field name that occurs more than once in a :class:`Struct` was asked for as
    one value. ``name`` is the name, ``positions`` where it occurs."""

    def __init__(self, name: str, positions: tuple[int, ...]) -> None:
        self.name = name
        self.positions = positions
        where = ", ".join(map(str, positions))
        super().__init__(
            f"field {name!r} occurs {len(positions)} times (positions {where}): "
            f"use s.getall({name!r}), s.fields or s[position]"
        )

    def __str__(self) -> str:  # KeyError's own str() quotes the message
        return str(self.args[0])


@functools.lru_cache(maxsize=1024)
def _positions(names: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Each name's positions; one table per distinct tuple of names (a schema)."""
    table: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        table.setdefault(name, []).append(i)
    return {name: tuple(found) for name, found in table.items()}


class Struct(tuple[Any, ...]):
    """An immutable struct value: the field values as a tuple, with their names.

    Positional access (``s[i]``, slices, iteration, unpacking) and equality are
    those of the tuple of values: a ``Struct`` equals any tuple (or ``Struct``)
    with the same values in the same order, whatever the names, as PySpark's
    ``Row`` does; compare ``s.fields`` to compare names too. ``s[name]`` is the
    value of the field ``name`` when it occurs once (``KeyError`` when it does not
    occur, :class:`AmbiguousField` when it occurs more than once); ``getall``,
    ``fields`` and ``names`` give every field. Nested structs are ``Struct`` too.
    """

    _names: tuple[str, ...]

    def __new__(cls, names: Iterable[str], values: Iterable[Any]) -> Struct:
        """A struct of ``values`` named ``names`` (as many of each, in schema order).

        Raises:
            ValueError: the counts differ.
        """
        names = tuple(names)
        self = super().__new__(cls, values)
        if len(names) != len(self):
            raise ValueError(f"{len(names)} field names for {len(self)} values")
        self.__dict__["_names"] = names
        return self

    @classmethod
    def of_names(cls, names: tuple[str, ...], values: list[Any]) -> Struct:
        """A struct of ``values`` named ``names``, as many of each (not checked: for decoders
        that built both from one schema)."""
        self = tuple.__new__(cls, values)
        self.__dict__["_names"] = names
        return self

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, Any]]) -> Struct:
        """A struct of ``(name, value)`` pairs, in order (names may repeat)."""
        listed = list(pairs)
        return cls((name for name, _ in listed), (value for _, value in listed))

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"Struct is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"Struct is immutable (cannot delete {name!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Struct, (self._names, tuple(self)))

    @property
    def names(self) -> tuple[str, ...]:
        """The field names in schema order (a name may occur more than once)."""
        return self._names

    @property
    def fields(self) -> tuple[tuple[str, Any], ...]:
        """Every field as a ``(name, value)`` pair, in schema order."""
        return tuple(zip(self._names, self, strict=True))

    def _position(self, name: str) -> int:
        found = _positions(self._names).get(name)
        if found is None:
            raise KeyError(name)
        if len(found) > 1:
            raise AmbiguousField(name, found)
        return found[0]

    @overload
    def __getitem__(self, key: SupportsIndex) -> Any: ...
    @overload
    def __getitem__(self, key: slice) -> tuple[Any, ...]: ...
    @overload
    def __getitem__(self, key: str) -> Any: ...
    def __getitem__(self, key: SupportsIndex | slice | str) -> Any:
        """``s[i]`` and ``s[a:b]`` as for a tuple (a slice is a plain tuple);
        ``s[name]``: the value of the one field named ``name``.

        Raises:
            KeyError: no field is named ``name``.
            AmbiguousField: more than one field is named ``name``.
        """
        if isinstance(key, str):
            return tuple.__getitem__(self, self._position(key))
        return tuple.__getitem__(self, key)

    def get(self, name: str, default: Any = None) -> Any:
        """The value of the one field named ``name``, ``default`` when none is.

        Raises:
            AmbiguousField: more than one field is named ``name``.
        """
        found = _positions(self._names).get(name)
        if found is None:
            return default
        if len(found) > 1:
            raise AmbiguousField(name, found)
        return tuple.__getitem__(self, found[0])

    def getall(self, name: str) -> tuple[Any, ...]:
        """The values of every field named ``name``, in schema order (empty when none)."""
        return tuple(tuple.__getitem__(self, i) for i in _positions(self._names).get(name, ()))

    def positions(self, name: str) -> tuple[int, ...]:
        """Where fields named ``name`` sit (empty when none does)."""
        return _positions(self._names).get(name, ())

    def has_repeated_names(self) -> bool:
        """Whether some name occurs more than once (then :meth:`asdict` refuses)."""
        return len(_positions(self._names)) != len(self._names)

    def asdict(self, *, recursive: bool = False) -> dict[str, Any]:
        """The fields as a ``dict`` (name -> value), for structs whose names are unique.

        ``recursive``: nested structs (also inside lists and map values) become
        dicts too.

        Raises:
            AmbiguousField: a name occurs more than once, in this struct or (when
                recursive) in a nested one; nothing would hold all its values.
        """
        table = _positions(self._names)
        if len(table) != len(self._names):
            name, found = next((n, p) for n, p in table.items() if len(p) > 1)
            raise AmbiguousField(name, found)
        if not recursive:
            return dict(zip(self._names, self, strict=True))
        return {name: _as_plain(value) for name, value in zip(self._names, self, strict=True)}

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={value!r}" for name, value in zip(self._names, self, strict=True))
        return f"Struct({inner})"


def _as_plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.asdict(recursive=True)
    if isinstance(value, list):
        return [_as_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _as_plain(v) for k, v in value.items()}
    return value
