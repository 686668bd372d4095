"""Per-schema ``Record`` writers compiled to straight-line Python (the ingest hot path).

:class:`~epochstate.daemon.codec.records.RecordEncoder` turns every ingested row into a
serialized ``Record``. Composing closures per field cost a call, a list and a
join per field; here the key and value schemas are turned once (through
:mod:`codegen`) into one function that writes each atomic field inline (short
lengths from a table, small integers without a varint loop) and calls the closure
encoders of :mod:`wire` only for decimals, structs, arrays and maps. The bytes are
exactly those of the closures (``tests/test_records.py`` checks it).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from epochstate.core.sparktypes import AtomicType, SparkType, StructType, type_to_simple_string
from epochstate.daemon.codec.codegen import FunctionSource, indented
from epochstate.daemon.codec.wire import value_encoder, varint

PresentWriter = Callable[[int, tuple[Any, ...], tuple[Any, ...]], bytes]

_MASK64 = (1 << 64) - 1
# The Row field tag (1, length-delimited) followed by a null Value: 0a 02 08 01.
_NULL_FIELD = b"\x0a\x02\x08\x01"
_INTS = ("byte", "short", "integer", "long")


def _field_source(v: str, out: str, t: SparkType, code: FunctionSource) -> list[str]:
    """Statements that set ``out`` to the bytes of the Row field (tag, length, Value)
    holding the decoded value ``v`` of type ``t``."""
    if isinstance(t, AtomicType) and t.name == "null":
        return [f"{out} = NF"]
    if not isinstance(t, AtomicType):
        encode = code.fresh("E", value_encoder(t))
        body = [f"p = {encode}({v})", f"{out} = b'\\x0a' + V(len(p)) + p"]
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
    return [f"if {v} is None:", f"    {out} = NF", "else:", *indented(body)]


def _row_source(prefix: str, schema: StructType, code: FunctionSource) -> list[str]:
    """Statements that set ``{prefix}r`` to the bytes of a Row of ``schema``, whose
    values are in the tuple ``{prefix}t`` (unpacking raises ValueError on arity)."""
    n = len(schema.fields)
    names = [f"{prefix}v{i}" for i in range(n)]
    lines = [f"({', '.join(names)}{',' if n == 1 else ''}) = {prefix}t" if n else f"() = {prefix}t"]
    for i, field in enumerate(schema.fields):
        lines += _field_source(f"{prefix}v{i}", f"{prefix}f{i}", field.type, code)
    joined = " + ".join(f"{prefix}f{i}" for i in range(n)) or "b''"
    lines.append(f"{prefix}r = {joined}")
    return lines


def compile_present(key_schema: StructType, value_schema: StructType) -> PresentWriter:
    """``present(partition, key, value)``: the serialized ``Record`` (key=1, value=2,
    found=3, partition=4). Raises ValueError when a tuple's arity is not its schema's."""
    label = f"record writer {type_to_simple_string(key_schema)} {type_to_simple_string(value_schema)}"
    code = FunctionSource(label, "present", ["partition", "kt", "wt"])
    code.bind_all(
        {
            "NF": _NULL_FIELD,
            "M": _MASK64,
            "S": [bytes((n,)) for n in range(128)],
            "V": varint,
            "D": struct.Struct("<d").pack,
        }
    )
    code.add(*_row_source("k", key_schema, code), *_row_source("w", value_schema, code))
    code.add(
        "n = len(kr); m = len(wr)",
        "return b''.join((b'\\x0a', S[n] if n < 128 else V(n), kr, b'\\x12', S[m] if m < 128 else V(m), wr,"
        " b'\\x18\\x01\\x20' + V(partition & M) if partition else b'\\x18\\x01'))",
    )
    present: PresentWriter = code.compile()
    return present
