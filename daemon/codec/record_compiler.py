"""Per-schema ``Record`` writers compiled to straight-line Python (the ingest hot path).

:class:`~epochstate.daemon.codec.records.RecordEncoder` turns every ingested row into a
serialized ``Record``. Composing closures per field cost a call, a list and a
join per field; here the key and value schemas are turned once into the source of
one function that writes each atomic field inline (short lengths from a table,
small integers without a varint loop) and calls the closure encoders of
:mod:`records` only for decimals, structs, arrays and maps. The bytes are exactly
those of the closures (``tests/test_records.py`` checks it).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from epochstate.core.sparktypes import AtomicType, SparkType, StructType, type_to_simple_string

PresentWriter = Callable[[int, tuple[Any, ...], tuple[Any, ...]], bytes]

_MASK64 = (1 << 64) - 1
# The Row field tag (1, length-delimited) followed by a null Value: 0a 02 08 01.
_NULL_FIELD = b"\x0a\x02\x08\x01"
_INTS = ("byte", "short", "integer", "long")


def _field_source(i: int, t: SparkType) -> list[str]:
    """Statements that set ``f{i}`` to the bytes of field ``i`` (tag, length, Value)."""
    v = f"v{i}"
    out = f"f{i}"
    if isinstance(t, AtomicType) and t.name == "null":
        return [f"{out} = NF"]
    lines = [f"if {v} is None:", f"    {out} = NF", "else:"]
    if not isinstance(t, AtomicType):
        body = [f"p = E{i}({v})", f"{out} = b'\\x0a' + V(len(p)) + p"]
    elif t.name in _INTS:
        body = [
            f"z = (({v} << 1) ^ ({v} >> 63)) & M",
            f"if z < 128: {out} = b'\\x0a\\x02\\x18' + S[z]",
            f"else: p = b'\\x18' + V(z); {out} = b'\\x0a' + S[len(p)] + p",
        ]
    elif t.name in ("float", "double"):
        body = [f"{out} = b'\\x0a\\x09\\x21' + D({v})"]
    elif t.name == "boolean":
        body = [f"{out} = b'\\x0a\\x02\\x10\\x01' if {v} else b'\\x0a\\x02\\x10\\x00'"]
    elif t.name in ("string", "binary"):
        tag = "\\x32" if t.name == "string" else "\\x3a"
        raw = f"{v}.encode('utf-8')" if t.name == "string" else f"bytes({v})"
        body = [
            f"e = {raw}; n = len(e)",
            f"if n < 126: {out} = b'\\x0a' + S[n + 2] + b'{tag}' + S[n] + e",
            f"else: p = b'{tag}' + V(n) + e; {out} = b'\\x0a' + V(len(p)) + p",
        ]
    else:  # date (tag 8), timestamp and timestamp_ntz (tag 9): int64 varints
        tag = "\\x40" if t.name == "date" else "\\x48"
        body = [
            f"u = {v} & M",
            f"if u < 128: {out} = b'\\x0a\\x02{tag}' + S[u]",
            f"else: p = b'{tag}' + V(u); {out} = b'\\x0a' + S[len(p)] + p",
        ]
    return lines + ["    " + line for line in body]


def _row_source(prefix: str, schema: StructType) -> tuple[list[str], dict[str, Any]]:
    """Statements that set ``{prefix}r`` to the bytes of a Row of ``schema``, whose
    values are in the tuple ``{prefix}t``; and the closure encoders they call."""
    from epochstate.daemon.codec.records import value_encoder

    n = len(schema.fields)
    names = [f"{prefix}v{i}" for i in range(n)]
    lines = [f"({', '.join(names)}{',' if n == 1 else ''}) = {prefix}t" if n else f"() = {prefix}t"]
    helpers: dict[str, Any] = {}
    for i, field in enumerate(schema.fields):
        source = _field_source(i, field.type)
        lines += [s.replace(f"v{i}", f"{prefix}v{i}").replace(f"f{i}", f"{prefix}f{i}") for s in source]
        if not isinstance(field.type, AtomicType):
            helpers[f"E{i}"] = value_encoder(field.type)
    joined = " + ".join(f"{prefix}f{i}" for i in range(n)) or "b''"
    lines.append(f"{prefix}r = {joined}")
    return lines, helpers


def compile_present(key_schema: StructType, value_schema: StructType) -> PresentWriter:
    """``present(partition, key, value)``: the serialized ``Record`` (key=1, value=2,
    found=3, partition=4). Raises ValueError when a tuple's arity is not its schema's."""
    from epochstate.daemon.codec.records import varint

    key_lines, key_helpers = _row_source("k", key_schema)
    value_lines, value_helpers = _row_source("w", value_schema)
    namespace: dict[str, Any] = {
        "NF": _NULL_FIELD,
        "M": _MASK64,
        "S": [bytes((n,)) for n in range(128)],
        "V": varint,
        "D": struct.Struct("<d").pack,
    }
    # Helper names are per row: prefix them so key and value helpers do not collide.
    for prefix, helpers, lines in (("k", key_helpers, key_lines), ("w", value_helpers, value_lines)):
        for name, encode in helpers.items():
            namespace[prefix + name] = encode
            for j, line in enumerate(lines):
                lines[j] = line.replace(f" {name}(", f" {prefix}{name}(")
    body = [
        *key_lines,
        *value_lines,
        "n = len(kr); m = len(wr)",
        "return b''.join((b'\\x0a', S[n] if n < 128 else V(n), kr, b'\\x12', S[m] if m < 128 else V(m), wr,"
        " b'\\x18\\x01\\x20' + V(partition & M) if partition else b'\\x18\\x01'))",
    ]
    # Bound as default arguments, the helpers are fast locals rather than globals.
    bound = ", ".join(f"{name}={name}" for name in namespace if name != "__builtins__")
    source = f"def present(partition, kt, wt, {bound}):\n" + "\n".join("    " + line for line in body) + "\n"
    exec(compile(source, f"<record writer {type_to_simple_string(key_schema)}>", "exec"), namespace)
    present: PresentWriter = namespace["present"]
    return present
