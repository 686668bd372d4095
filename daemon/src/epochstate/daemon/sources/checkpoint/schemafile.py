"""Parsing of a state store's schema file (``<store dir>/_metadata/schema``).

The file is written with ``java.io.DataOutputStream``:

* ``v1``: ``writeUTF("v1")``, ``writeUTF(key schema JSON)``, ``writeUTF(value schema JSON)``;
* ``v2``: ``writeUTF("v2")``, then for the key and then the value schema an int32
  number of chunks followed by that many ``writeUTF`` chunks whose concatenation
  is the JSON (``writeUTF`` cannot hold more than 65535 bytes).

``writeUTF`` is a 2-byte big-endian length and Java's *modified* UTF-8 (NUL as
``C0 80``, characters outside the BMP as two 3-byte surrogates).

Operators with column families (transformWithState) keep their schemas in
``state/<op>/_stateSchema/<store>/<batch>_<uuid>`` instead, in format ``v3``:
``writeUTF("v3")``, an int32 number of column families, then for each: its name
(``writeUTF``), an int16 key schema id, the chunked key schema JSON (as in v2), an
int16 value schema id, the chunked value schema JSON, the chunked JSON of its key
encoder spec (``{"keyStateEncoderType": "NoPrefixKeyStateEncoderSpec" |
"PrefixKeyScanStateEncoderSpec" (+ "numColsPrefixKey") |
"RangeKeyScanStateEncoderSpec" (+ "orderingOrdinals")}``) and the chunked JSON of
the map state's user key schema (``{    }`` when there is none). Schema ids count
schema changes (they matter to the Avro encoding).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from epochstate.core import jsontext
from epochstate.core.sparktypes import SchemaError, StructType, parse_struct
from epochstate.daemon.sources.errors import CorruptCheckpointFile, UnsupportedCheckpoint

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
NO_PREFIX = "NoPrefixKeyStateEncoderSpec"
PREFIX_SCAN = "PrefixKeyScanStateEncoderSpec"
RANGE_SCAN = "RangeKeyScanStateEncoderSpec"


class _Reader:
    def __init__(self, data: bytes, source: str) -> None:
        self.data = data
        self.pos = 0
        self.source = source

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise CorruptCheckpointFile(f"{self.source}: truncated at offset {self.pos}")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def read_utf(self) -> str:
        """One ``writeUTF`` string as UTF-16 code units (surrogates not yet paired)."""
        (length,) = _U16.unpack(self._take(2))
        raw = self._take(length)
        try:
            return _decode_units(raw)
        except UnicodeError as err:
            raise CorruptCheckpointFile(f"{self.source}: invalid modified UTF-8: {err}") from err

    def read_int(self) -> int:
        (value,) = _I32.unpack(self._take(4))
        return int(value)

    def read_short(self) -> int:
        (value,) = _I16.unpack(self._take(2))
        return int(value)

    def read_chunked(self) -> str:
        """An int32 number of ``writeUTF`` chunks and their concatenation."""
        chunks = self.read_int()
        if chunks < 0:
            raise CorruptCheckpointFile(f"{self.source}: negative chunk count {chunks}")
        # A chunk may end between the two halves of a surrogate pair.
        return _pair_surrogates("".join(self.read_utf() for _ in range(chunks)), self.source)


def _decode_units(raw: bytes) -> str:
    return raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")


def _pair_surrogates(units: str, source: str) -> str:
    try:
        return units.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeError as err:
        raise CorruptCheckpointFile(f"{source}: unpaired surrogate: {err}") from err


def decode_modified_utf8(raw: bytes, source: str = "<bytes>") -> str:
    """Decode Java's modified UTF-8 (as written by ``DataOutput.writeUTF``).

    Raises:
        CorruptCheckpointFile: the bytes are not modified UTF-8.
    """
    try:
        units = _decode_units(raw)
    except UnicodeError as err:
        raise CorruptCheckpointFile(f"{source}: invalid modified UTF-8: {err}") from err
    return _pair_surrogates(units, source)


def parse_schema_file(data: bytes, source: str = "<bytes>") -> tuple[StructType, StructType]:
    """Return ``(key schema, value schema)`` of a v1 or v2 schema file's bytes.

    Raises:
        CorruptCheckpointFile: truncated or malformed file, or JSON that is not a schema.
        UnsupportedCheckpoint: another format version, or a data type we cannot decode.
    """
    reader = _Reader(data, source)
    version = _pair_surrogates(reader.read_utf(), source)
    if version == "v1":
        texts = [reader.read_utf(), reader.read_utf()]
    elif version == "v2":
        texts = [reader.read_chunked(), reader.read_chunked()]
    else:
        raise UnsupportedCheckpoint(f"{source}: state schema format {version!r} (expected v1 or v2)")
    if reader.pos != len(data):
        raise CorruptCheckpointFile(f"{source}: {len(data) - reader.pos} trailing bytes")
    texts = [_pair_surrogates(text, source) for text in texts]
    try:
        return parse_struct(texts[0]), parse_struct(texts[1])
    except SchemaError as err:
        raise UnsupportedCheckpoint(f"{source}: {err}") from err
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CorruptCheckpointFile(f"{source}: not a schema JSON: {err!r}") from err


@dataclass(frozen=True, slots=True)
class ColumnFamilySchema:
    """One column family of a v3 schema file. ``encoder`` is the key encoder spec's
    type (:data:`NO_PREFIX`, :data:`PREFIX_SCAN` or :data:`RANGE_SCAN`) with
    ``num_cols_prefix_key`` or ``ordering_ordinals``; ``user_key_schema`` is set for
    map state."""

    name: str
    key_schema: StructType
    value_schema: StructType
    encoder: str
    num_cols_prefix_key: int = 0
    ordering_ordinals: tuple[int, ...] = ()
    user_key_schema: StructType | None = None
    key_schema_id: int = 0
    value_schema_id: int = 0
    # The schemas of other ids this family's rows may have been written with (older
    # runs' schema files), as (schema id, schema) pairs.
    written_keys: tuple[tuple[int, StructType], ...] = ()
    written_values: tuple[tuple[int, StructType], ...] = ()


def parse_column_family_schemas(data: bytes, source: str = "<bytes>") -> tuple[ColumnFamilySchema, ...]:
    """The column families of a v3 schema file's bytes, in file order.

    Raises:
        CorruptCheckpointFile: truncated or malformed file or JSON.
        UnsupportedCheckpoint: another format version, an unknown key encoder, or a
            data type we cannot decode.
    """
    reader = _Reader(data, source)
    version = _pair_surrogates(reader.read_utf(), source)
    if version != "v3":
        raise UnsupportedCheckpoint(f"{source}: state schema format {version!r} (expected v3)")
    count = reader.read_int()
    if count < 0:
        raise CorruptCheckpointFile(f"{source}: negative column family count {count}")
    families = []
    for _ in range(count):
        name = _pair_surrogates(reader.read_utf(), source)
        key_id, key_text = reader.read_short(), reader.read_chunked()
        value_id, value_text = reader.read_short(), reader.read_chunked()
        spec_text, user_key_text = reader.read_chunked(), reader.read_chunked()
        try:
            spec = jsontext.loads(spec_text)
            encoder = str(spec["keyStateEncoderType"])
            user_key = jsontext.loads(user_key_text)
            family = ColumnFamilySchema(
                name,
                parse_struct(key_text),
                parse_struct(value_text),
                encoder,
                int(spec.get("numColsPrefixKey", 0)),
                tuple(int(o) for o in spec.get("orderingOrdinals", ())),
                parse_struct(user_key_text) if user_key else None,
                key_id,
                value_id,
            )
        except SchemaError as err:
            raise UnsupportedCheckpoint(f"{source}: column family {name!r}: {err}") from err
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise CorruptCheckpointFile(f"{source}: column family {name!r}: {err!r}") from err
        if encoder not in (NO_PREFIX, PREFIX_SCAN, RANGE_SCAN):
            raise UnsupportedCheckpoint(f"{source}: column family {name!r}: key encoder {encoder!r}")
        families.append(family)
    if reader.pos != len(data):
        raise CorruptCheckpointFile(f"{source}: {len(data) - reader.pos} trailing bytes")
    return tuple(families)
