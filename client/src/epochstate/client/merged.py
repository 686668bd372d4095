"""The rows of many records read in one parse, without an object per record or value.

Decoding a response as it is declared makes a Python object of each record, its key
and value rows and each field's ``Value`` when they are read, and asks each value
which kind it holds: most of a read's client time. Protobuf's wire format allows
another reading of the same bytes. A parser merges the occurrences of a field
declared singular (an embedded message: as ``MergeFrom`` would; a repeated field
inside it: concatenated in order), and a repeated scalar is read packed or not. So
the bytes parsed as a *merged view* (``records`` or ``changes`` declared singular,
down to a ``Value`` whose kinds are declared repeated) give each kind's values of
every key and every value as one list, in order, made in C: for a key of one
``long`` field, ``records.key.fields.int`` is that column. A nested value (struct,
array, map) is read as its bytes, parsed as declared only when it is converted.

The columns are trusted only when the counts prove them: each row has exactly one
value of its field's kind per field and nothing else (no null but in a ``void``
field, no unknown value); else :func:`struct_rows` returns None and the caller
decodes the message as declared. Counts cannot tell which row a value came from: a
row's fields of different kinds are placed by the schema's order. That is how the
daemon writes them (``epochstate.daemon.codec.wire`` writes every value in its type's
kind, every field of the schema), so both readings give the same values.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any, TypeVar

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from epochstate.client.structs import Struct
from epochstate.client.values import from_map, from_row, from_value
from epochstate.core.sparktypes import ArrayType, AtomicType, DecimalType, SparkType, StructType
from epochstate.v1 import epochstate_pb2 as pb

# The Value kind each atomic Spark type is sent in.
ATOMIC_KINDS: dict[str, str] = {
    "boolean": "bool",
    "byte": "int",
    "short": "int",
    "integer": "int",
    "long": "int",
    "float": "float",
    "double": "float",
    "string": "string",
    "binary": "binary",
    "date": "date",
    "timestamp": "timestamp_micros",
    "timestamp_ntz": "timestamp_micros",
    "null": "null",
}
NULL = "null"
VALUE_KINDS = tuple(f.name for f in pb.Value.DESCRIPTOR.fields)
# The fields of ChangesResponse the merged view of its changes does not declare as they are.
HEADLESS = ("changes",)


def _view_file() -> descriptor_pb2.FileDescriptorProto:
    """The views, derived from the declared messages' field numbers and types."""
    field = descriptor_pb2.FieldDescriptorProto
    repeated, singular = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    view = descriptor_pb2.FileDescriptorProto(
        name="epochstate/v1/merged_views.proto", package="epochstate.views", syntax="proto2"
    )

    def message(name: str, fields: Sequence[tuple[str, int, int, int, str]]) -> None:
        declared = view.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            added = declared.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                added.type_name = f".epochstate.views.{type_name}"

    message(
        "Values",
        [
            (f.name, f.number, field.TYPE_BYTES if f.type == field.TYPE_MESSAGE else f.type, repeated, "")
            for f in pb.Value.DESCRIPTOR.fields
        ],
    )
    row = pb.Row.DESCRIPTOR.fields_by_name["fields"]
    message("Rows", [(row.name, row.number, field.TYPE_MESSAGE, singular, "Values")])
    record = pb.Record.DESCRIPTOR.fields_by_name
    message(
        "Records",
        [
            ("key", record["key"].number, field.TYPE_MESSAGE, singular, "Rows"),
            ("value", record["value"].number, field.TYPE_MESSAGE, singular, "Rows"),
            ("found", record["found"].number, field.TYPE_BOOL, repeated, ""),
            ("partition", record["partition"].number, field.TYPE_INT32, repeated, ""),
        ],
    )
    # A MultiGetResponse's or ScanResponse's records (the same field in both).
    (number,) = {
        m.DESCRIPTOR.fields_by_name["records"].number for m in (pb.MultiGetResponse, pb.ScanResponse)
    }
    message("MergedRecords", [("records", number, field.TYPE_MESSAGE, singular, "Records")])
    # The same rows, each field's Value as its bytes: where the nulls are.
    message("RawRows", [(row.name, row.number, field.TYPE_BYTES, repeated, "")])
    message(
        "RawRecords",
        [
            ("key", record["key"].number, field.TYPE_MESSAGE, singular, "RawRows"),
            ("value", record["value"].number, field.TYPE_MESSAGE, singular, "RawRows"),
        ],
    )
    message("MergedRawRecords", [("records", number, field.TYPE_MESSAGE, singular, "RawRecords")])
    message("Present", [])
    message(
        "Head",
        [
            ("found", record["found"].number, field.TYPE_BOOL, singular, ""),
            ("partition", record["partition"].number, field.TYPE_INT32, singular, ""),
            ("value", record["value"].number, field.TYPE_MESSAGE, singular, "Present"),
        ],
    )
    message("Heads", [("records", number, field.TYPE_MESSAGE, repeated, "Head")])
    change = pb.Change.DESCRIPTOR.fields_by_name
    message(
        "Changes",
        [
            ("type", change["type"].number, field.TYPE_INT32, repeated, ""),
            ("record", change["record"].number, field.TYPE_MESSAGE, singular, "Records"),
        ],
    )
    response = pb.ChangesResponse.DESCRIPTOR.fields_by_name
    # The response's other fields as they are declared (all scalars).
    message(
        "MergedChanges",
        [
            (f.name, f.number, f.type, singular, "")
            for f in pb.ChangesResponse.DESCRIPTOR.fields
            if f.name not in HEADLESS
        ]
        + [("changes", response["changes"].number, field.TYPE_MESSAGE, singular, "Changes")],
    )
    message("RawChanges", [("record", change["record"].number, field.TYPE_MESSAGE, singular, "RawRecords")])
    message(
        "MergedRawChanges",
        [("changes", response["changes"].number, field.TYPE_MESSAGE, singular, "RawChanges")],
    )
    message(
        "Partition",
        [
            ("partition", record["partition"].number, field.TYPE_INT32, singular, ""),
            ("value", record["value"].number, field.TYPE_MESSAGE, singular, "Present"),
        ],
    )
    message("PartitionOf", [("record", change["record"].number, field.TYPE_MESSAGE, singular, "Partition")])
    message(
        "Partitions", [("changes", response["changes"].number, field.TYPE_MESSAGE, repeated, "PartitionOf")]
    )
    return view


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_view_file())


def _view(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"epochstate.views.{name}"))


MERGED_RECORDS: Any = _view("MergedRecords")
"""A MultiGetResponse or ScanResponse read merged: ``records`` (key, value, found, partition)."""
RAW_RECORDS: Any = _view("MergedRawRecords")
"""The same read merged, each field's Value as its bytes (``records.key.fields``...)."""
HEADS: Any = _view("Heads")
"""The same read per record, of its ``found``, ``partition`` and whether it has a value."""
MERGED_CHANGES: Any = _view("MergedChanges")
"""A ChangesResponse read merged: its header as declared, ``changes`` (type, record)."""
RAW_CHANGES: Any = _view("MergedRawChanges")
"""A ChangesResponse read merged, each field's Value as its bytes (``changes.record.key.fields``...)."""
PARTITIONS: Any = _view("Partitions")
"""A ChangesResponse read per change, of its record's ``partition`` and whether it has a value."""


def kinds_of(row: StructType) -> list[str]:
    """The ``Value`` kind each field of ``row`` is sent in."""
    out = []
    for f in row.fields:
        t = f.type
        if isinstance(t, AtomicType):
            out.append(ATOMIC_KINDS[t.name])
        elif isinstance(t, DecimalType):
            out.append("decimal")
        elif isinstance(t, StructType):
            out.append("struct")
        elif isinstance(t, ArrayType):
            out.append("array")
        else:
            out.append("map")
    return out


def columns(values: Message, kinds: list[str], rows: int) -> list[list[Any]] | None:
    """Each field's values of ``rows`` rows whose fields are sent in ``kinds``, from their
    merged ``values``; None unless each kind holds exactly one value per field of it and
    row, and no other kind any."""
    width: dict[str, int] = {}
    for kind in kinds:
        width[kind] = width.get(kind, 0) + 1
    for kind in VALUE_KINDS:
        if len(getattr(values, kind)) != rows * width.get(kind, 0):
            return None
    lists = {kind: getattr(values, kind)[:] for kind in width if kind != NULL}
    seen: dict[str, int] = {}
    out = []
    for kind in kinds:
        i = seen[kind] = seen.get(kind, -1) + 1
        if kind == NULL:
            out.append([None] * rows)
        else:
            out.append(lists[kind] if width[kind] == 1 else lists[kind][i :: width[kind]])
    return out


def spread(values: list[Any], present: list[bool]) -> list[Any]:
    """``values`` of the rows ``present``, with None at each other one."""
    given = iter(values)
    return [next(given) if p else None for p in present]


_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_DT = dt.datetime(1970, 1, 1)


def _date(days: int) -> dt.date:
    return _EPOCH_DATE + dt.timedelta(days=days)


def _timestamp(micros: int) -> dt.datetime:
    return _EPOCH_DT + dt.timedelta(microseconds=micros)


def _converter(kind: str, t: SparkType) -> Callable[[Any], Any] | None:
    """What turns a merged column's value of ``kind`` (a field of type ``t``) into what
    :func:`~epochstate.client.values.from_value` gives for it; None: the value itself."""
    if kind == "decimal":
        return Decimal
    if kind == "date":
        return _date
    if kind == "timestamp_micros":
        return _timestamp
    if kind == "struct":
        if isinstance(t, StructType):
            return lambda data: from_row(pb.Row.FromString(data), t)
        return lambda data: list(pb.Row.FromString(data).fields)
    if kind == "array":
        element = t.element if isinstance(t, ArrayType) else AtomicType("null")
        return lambda data: [from_value(e, element) for e in pb.Array.FromString(data).elements]
    if kind == "map":
        return lambda data: from_map(pb.Map.FromString(data), t)
    return None


class RowDecoder:
    """Structs of one schema from merged rows: the schema's kinds, names and converters,
    worked out once."""

    def __init__(self, schema: StructType) -> None:
        self.schema = schema
        self.kinds = kinds_of(schema)
        self.names = schema.names
        self.converters = [_converter(k, f.type) for k, f in zip(self.kinds, schema.fields, strict=True)]

    def rows(
        self, values: Message, count: int, raw: Callable[[], Sequence[bytes]] | None = None
    ) -> list[Struct] | None:
        """The ``count`` structs merged in ``values``; None when the counts do not prove them.
        ``raw``: the bytes of each of their Values, in order, read when some are null."""
        found = columns(values, self.kinds, count)
        nullable = False
        if found is None and raw is not None:
            found = self._columns_with_nulls(values, count, raw())
            nullable = True
        if found is None:
            return None
        for i, convert in enumerate(self.converters):
            if convert is not None:
                column = found[i]
                found[i] = (
                    [None if v is None else convert(v) for v in column]
                    if nullable
                    else list(map(convert, column))
                )
        names = self.names
        new = tuple.__new__
        out: list[Struct] = []
        append = out.append
        # As Struct.of_names makes them, without a call per struct.
        for values_of in zip(*found, strict=True) if found else [()] * count:
            made = new(Struct, values_of)
            made.__dict__["_names"] = names
            append(made)
        return out

    def _columns_with_nulls(
        self, values: Message, count: int, raw: Sequence[bytes]
    ) -> list[list[Any]] | None:
        """As :func:`columns`, for rows some of whose values are null: each Value's bytes
        say which (a null is written as ``null = true``), each kind's merged values fill its
        fields' other places in order. None unless the counts prove them: one Value per
        field and row, each kind as many values as its fields' places not null, as many
        nulls as null places."""
        width = len(self.kinds)
        if len(raw) != count * width:
            return None
        present = [b != _NULL_VALUE for b in raw]
        if len(getattr(values, NULL)) != len(raw) - present.count(True):
            return None
        places: dict[str, list[int]] = {}
        for i, kind in enumerate(self.kinds):
            places.setdefault(kind, []).append(i)
        out: list[list[Any]] = [[] for _ in self.kinds]
        for kind in VALUE_KINDS:
            fields = places.get(kind)
            if fields is None:
                if kind != NULL and len(getattr(values, kind)):
                    return None
                continue
            if kind == NULL:
                if any(any(present[i::width]) for i in fields):
                    return None  # a void field's value that is not a null
                for i in fields:
                    out[i] = [None] * count
                continue
            if len(fields) == width:
                mask = present
            elif len(fields) == 1:
                mask = present[fields[0] :: width]
            else:
                mask = [p for row in zip(*(present[i::width] for i in fields), strict=True) for p in row]
            given = getattr(values, kind)[:]
            if len(given) != mask.count(True):
                return None
            placed = spread(given, mask)
            for n, i in enumerate(fields):
                out[i] = placed[n :: len(fields)] if len(fields) > 1 else placed
        return out


# A null Value as the daemon writes it (null = true).
_NULL_VALUE = pb.Value(null=True).SerializeToString()

# The decoders of the schemas decoded lately, by id (the schema is held by the decoder,
# so that its id is not another's while the entry lives); emptied when full.
_DECODERS: dict[int, RowDecoder] = {}
_DECODERS_MOST = 1024


def decoder(schema: StructType) -> RowDecoder:
    """The :class:`RowDecoder` of ``schema``."""
    known = _DECODERS.get(id(schema))
    if known is not None and known.schema is schema:
        return known
    if len(_DECODERS) >= _DECODERS_MOST:
        _DECODERS.clear()
    made = _DECODERS[id(schema)] = RowDecoder(schema)
    return made


Made = TypeVar("Made")


def instances(cls: type[Made], fields: Iterable[dict[str, Any]]) -> list[Made]:
    """One instance of the frozen dataclass ``cls`` per dict of ``fields``, each naming every
    field of ``cls``: set at once, as ``__init__`` would set them (a frozen dataclass's
    ``__init__`` sets each through ``object.__setattr__``, which costs as much as decoding a
    record's key and value). ``cls`` must check nothing in ``__init__`` or ``__post_init__``."""
    new = object.__new__
    out: list[Made] = []
    append = out.append
    for each in fields:
        made = new(cls)
        made.__dict__.update(each)
        append(made)
    return out


def once(read: Callable[[], Any]) -> Callable[[], Any]:
    """``read``, called the first time only."""
    done: list[Any] = []

    def first() -> Any:
        if not done:
            done.append(read())
        return done[0]

    return first


def records(
    data: bytes, count: int, key: StructType, value: StructType
) -> tuple[list[Struct], list[Struct | None], list[bool], list[int]] | None:
    """The keys, values (None where not found), found flags and partitions of the ``count``
    records of ``data``, a serialized MultiGetResponse or ScanResponse whose records are of
    schemas ``key`` and ``value``; None when the counts do not prove them."""
    merged = MERGED_RECORDS.FromString(data).records
    found = list(merged.found)
    partitions = list(merged.partition) or [0] * count  # none on the wire: every one is 0
    if len(found) != count or len(partitions) != count or not all(found):
        # Some record not found, or some in partition 0: a false or a zero is not on the wire.
        heads = HEADS.FromString(data).records
        found = [h.found for h in heads]
        partitions = [h.partition for h in heads]
        if found != [h.HasField("value") for h in heads]:
            return None  # a value row where none is found, or none where one is
    raw = once(lambda: RAW_RECORDS.FromString(data).records)
    keys = decoder(key).rows(merged.key.fields, count, lambda: raw().key.fields)
    hits = found.count(True)
    values = decoder(value).rows(merged.value.fields, hits, lambda: raw().value.fields)
    if keys is None or values is None:
        return None
    spread_values: list[Struct | None] = list(values) if hits == count else spread(values, found)
    return keys, spread_values, found, partitions
