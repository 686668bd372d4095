"""Stored state rows straight to store rows: raw key and value bytes in, the store's
encoded key and serialized ``Record`` out (the ingest hot path).

Decoding each row into Python values, then encoding those values twice (the
``Record`` payload and the :mod:`keycodec` key), built two tuples and went through
three layers of calls per row. A :class:`Transcoder` is compiled per (key schema,
value schema, framing), through :mod:`~epochstate.daemon.codec.codegen`, into one
function that unpacks the UnsafeRow slots and writes both encodings of every
atomic field inline, and into a loop of the same statements over many rows (no
call per row). Values that are not atomic
(decimals, structs, arrays, maps) are converted to Python values and encoded by the
general encoders.

The bytes are exactly those of the reference path (decode with the provider's row
decoders, :meth:`RecordEncoder.present`, :func:`keycodec.encode_fields`), which
``tests/ingest/test_transcoder.py`` checks. Rows the compiled function does not
take (a null field, a prefix-scan key, anything that fails) go through that
reference path, so damaged rows raise the reference path's :class:`CorruptRow`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

from epochstate.core.sparktypes import AtomicType, SparkType, StructType, type_to_simple_string
from epochstate.daemon.codec import keycodec
from epochstate.daemon.codec.codegen import FunctionSource, indented
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.codec.wire import row_encoder, value_encoder, varint
from epochstate.daemon.sources.changes import RowFraming
from epochstate.daemon.sources.rows.unsaferow import slot_converter, slot_format

RowTranscoder = Callable[[int, bytes, bytes], tuple[bytes, bytes]]
RowsTranscoder = Callable[[int, Iterable[tuple[bytes, bytes | None]], dict[bytes, bytes | None]], None]
RowDecode = Callable[[bytes], tuple[Any, ...]]

# Where the compiled code gives a row to the reference path: a statement per mode.
_FALLBACK = "<fallback>"

_MASK64 = (1 << 64) - 1
_SIGN = 1 << 63
_LOW32 = 0xFFFFFFFF
_INTS = ("byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz")


class Transcoder:
    """Turns a store's raw (key, value) rows into (encoded key, ``Record`` bytes).

    ``decode_key`` and ``decode_value`` are the provider's row decoders (raising
    ``CorruptRow``); they define the result and serve the rows the compiled code
    does not take. Thread-safe (holds no mutable state).
    """

    __slots__ = ("key", "row", "rows")

    def __init__(
        self,
        key_schema: StructType,
        value_schema: StructType,
        framing: RowFraming,
        decode_key: RowDecode,
        decode_value: RowDecode,
    ) -> None:
        present = RecordEncoder(key_schema, value_schema).present
        encode_key = keycodec.encode_fields

        def reference(partition: int, raw_key: bytes, raw_value: bytes) -> tuple[bytes, bytes]:
            key = decode_key(raw_key)
            return encode_key(key), present(partition, key, decode_value(raw_value))

        self.row: RowTranscoder = _compile(key_schema, value_schema, framing, decode_key, reference, False)
        """``row(partition, raw_key, raw_value)``: the encoded key and the ``Record``.

        Raises:
            CorruptRow: the bytes do not fit the schemas (from the reference path).
        """
        self.key: Callable[[bytes], bytes] = lambda raw_key: encode_key(decode_key(raw_key))
        """The encoded key of a removed row's raw key. Raises CorruptRow."""
        rows: RowsTranscoder = _compile(key_schema, value_schema, framing, decode_key, reference, True)
        self.rows = rows
        """``rows(partition, raw_rows, out)``: sets ``out[encoded key]`` for every
        (raw key, raw value) row, to its ``Record`` or, for a ``None`` value (a
        removal), to ``None``; what :attr:`row` and :attr:`key` give, row by row,
        without a call per row.

        Raises:
            CorruptRow: a row does not fit the schemas (``out`` then holds the rows
                before it).
        """


# Field heads made once: for strings and binaries the Value tag and both lengths
# for every short length; for integers the whole field for every one-byte varint.
_HEADS = {tag: [bytes((0x0A, n + 2, tag, n)) for n in range(126)] for tag in (0x32, 0x3A)}
_SMALL_INTS = {tag: [b"\x0a\x02" + bytes((tag, z)) for z in range(128)] for tag in (0x18, 0x40, 0x48)}


def _field(i: int, t: SparkType, part: str, key: bool, base: str, code: FunctionSource) -> list[str]:
    """Statements setting ``{part}f{i}`` (the Row field: tag, length, Value) and, for
    keys, ``{part}k{i}`` (the keycodec bytes) from the slot ``{part}v{i}`` of the row
    in ``{part}b`` that starts at ``base``."""
    v, f, k, buf = f"{part}v{i}", f"{part}f{i}", f"{part}k{i}", f"{part}b"
    if isinstance(t, AtomicType) and t.name == "null":
        return [f"{f} = NF", *([f"{k} = KN"] if key else [])]
    if isinstance(t, AtomicType) and t.name in ("string", "binary"):
        lines = [
            f"s = {base} + ({v} >> 32); e = s + ({v} & {_LOW32})",
            f"if e > len({buf}): raise IndexError",
            f"r = {buf}[s:e]",
        ]
        if t.name == "string":
            # The JVM's decoding of invalid UTF-8; ASCII (most keys) round-trips as is.
            lines.append("if not r.isascii(): r = r.decode('utf-8', 'replace').encode('utf-8')")
        value_tag = 0x32 if t.name == "string" else 0x3A
        heads = code.bind(f"H{value_tag:x}", _HEADS[value_tag])
        lines += [
            "n = len(r)",
            f"if n < 126: {f} = {heads}[n] + r",
            f"else: p = b'\\x{value_tag:x}' + V(n) + r; {f} = b'\\x0a' + V(len(p)) + p",
        ]
        if key:
            head = "\\x30" if t.name == "string" else "\\x31"
            lines.append(f"{k} = b'{head}' + r.replace(b'\\x00', b'\\x00\\xff') + b'\\x00\\x00'")
        return lines
    if isinstance(t, AtomicType) and t.name in _INTS:
        if t.name in ("byte", "short", "integer", "long"):
            tag, word = 0x18, f"(({v} << 1) ^ ({v} >> 63)) & M"
        else:
            tag, word = (0x40 if t.name == "date" else 0x48), f"{v} & M"
        small = code.bind(f"I{tag:x}", _SMALL_INTS[tag])
        lines = [
            f"z = {word}",
            f"if z < 128: {f} = {small}[z]",
            f"elif z < 16384: {f} = b'\\x0a\\x03\\x{tag:x}' + S[z & 127 | 128] + S[z >> 7]",
            f"else: p = b'\\x{tag:x}' + V(z); {f} = b'\\x0a' + S[len(p)] + p",
        ]
        if key:
            lines.append(f"{k} = KI + Q({v} + {_SIGN})")
        return lines
    if isinstance(t, AtomicType) and t.name == "boolean":
        lines = [f"{f} = b'\\x0a\\x02\\x10\\x01' if {v} else b'\\x0a\\x02\\x10\\x00'"]
        if key:
            lines.append(f"{k} = KT if {v} else KF")
        return lines
    if isinstance(t, AtomicType) and t.name in ("float", "double"):
        return [f"{f} = b'\\x0a\\x09\\x21' + D({v})", *([f"{k} = KE({v})"] if key else [])]
    # Decimals, structs, arrays, maps: through the Python value.
    convert = slot_converter(t)
    encode = code.bind(f"{part}E{i}", value_encoder(t))
    lines = [
        f"x = {code.bind(f'{part}C{i}', convert)}({buf}, {base}, {v})" if convert is not None else f"x = {v}",
        f"p = {encode}(x); {f} = b'\\x0a' + V(len(p)) + p",
    ]
    if key:
        lines.append(f"{k} = KE(x)")
    return lines


def _row(part: str, schema: StructType, key: bool, base: int, code: FunctionSource) -> list[str]:
    """Statements setting ``{part}r`` (the Row) and for keys ``{part}k`` (keycodec),
    or giving the row to the reference path when it has a null field."""
    n = len(schema.fields)
    if n == 0:
        return [f"{part}r = b''", *([f"{part}k = b''"] if key else [])]
    words = (n + 63) // 64
    bits = [f"{part}n{w}" for w in range(words)]
    slots = [f"{part}v{i}" for i in range(n)]
    unpack = code.bind(f"{part}U", struct.Struct("<" + slot_format(schema)).unpack_from)
    lines = [
        f"({', '.join(bits + slots)},) = {unpack}({part}b, {base})",
        f"if {' or '.join(bits)}: {_FALLBACK}",
    ]
    for i, field in enumerate(schema.fields):
        lines += _field(i, field.type, part, key, str(base), code)
    lines.append(f"{part}r = " + " + ".join(f"{part}f{i}" for i in range(n)))
    if key:
        lines.append(f"{part}k = " + " + ".join(f"{part}k{i}" for i in range(n)))
    return lines


_CONSTANTS: dict[str, Any] = {
    "NF": b"\x0a\x02\x08\x01",
    "KN": keycodec.encode(None),
    "KT": keycodec.encode(True),
    "KF": keycodec.encode(False),
    "KI": keycodec.encode(0)[:1],
    "KE": keycodec.encode,
    "M": _MASK64,
    "S": [bytes((n,)) for n in range(256)],
    "V": varint,
    "D": struct.Struct("<d").pack,
    "Q": struct.Struct(">Q").pack,
    "KX": keycodec.encode_fields,
}


def _compile(
    key_schema: StructType,
    value_schema: StructType,
    framing: RowFraming,
    decode_key: RowDecode,
    reference: RowTranscoder,
    batch: bool,
) -> Any:
    """One row's function (``batch`` false: :data:`RowTranscoder`) or the loop over
    rows (:data:`RowsTranscoder`), the same statements either way."""
    label = f"transcoder {type_to_simple_string(key_schema)} {type_to_simple_string(value_schema)}"
    code = FunctionSource(
        label, "rows" if batch else "row", ["partition", "pairs" if batch else "kb", "out" if batch else "wb"]
    )
    code.bind_all({**_CONSTANTS, "REF": reference, "KD": decode_key, "FB": _Fallback()})
    base = 1 if framing.version_byte else 0
    lines: list[str] = []
    checks = []
    if framing.version_byte:
        checks.append("wb[0]")
    if framing.num_cols_prefix_key:
        # Two rows in one key: decoded, then encoded through the Python values.
        lines += ["t = KD(kb)", "kk = KX(t)", f"kr = {code.bind('KR', row_encoder(key_schema))}(t)"]
    else:
        if framing.version_byte:
            checks.append("kb[0]")
        lines += _row("k", key_schema, True, base, code)
    lines += _row("w", value_schema, False, base, code)
    # The Record's partition fields, the same for all rows of a batch call.
    trailer = "b'\\x18\\x01\\x20' + V(partition & M) if partition else b'\\x18\\x01'"
    record = (
        "b''.join((b'\\x0a', S[n] if n < 128 else V(n), kr, b'\\x12', S[m] if m < 128 else V(m),"
        f" wr, {'PT' if batch else trailer}))"
    )
    body = [
        *([f"if {' or '.join(checks)}: {_FALLBACK}"] if checks else []),
        *lines,
        "n = len(kr); m = len(wr)",
        f"out[kk] = {record}" if batch else f"return kk, {record}",
    ]
    # Anything the compiled code cannot take goes to the reference path, which
    # raises CorruptRow for a damaged row.
    if batch:
        code.add(
            f"PT = {trailer}",
            "for kb, wb in pairs:",
            "    if wb is None:",
            "        out[KX(KD(kb))] = None",
            "        continue",
            "    try:",
            *indented((line.replace(_FALLBACK, "raise FB") for line in body), 2),
            "    except Exception:",
            "        k, p = REF(partition, kb, wb)",
            "        out[k] = p",
        )
    else:
        code.add(
            "try:",
            *indented(line.replace(_FALLBACK, "return REF(partition, kb, wb)") for line in body),
            "except Exception:",
            "    return REF(partition, kb, wb)",
        )
    return code.compile()


class _Fallback(Exception):
    """Raised inside the compiled loop to give a row to the reference path."""
