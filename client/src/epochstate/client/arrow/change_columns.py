"""The columns of a Changes message read in one parse, without an object per change.

Decoding ``ChangesResponse`` as it is declared makes a Python object of each change,
its record, key and value rows and each field's ``Value`` when they are read: about
ten per change, most of the client's time. Protobuf's wire format allows another
reading of the same bytes. A parser merges the occurrences of a field declared
singular (an embedded message: as ``MergeFrom`` would; a repeated field inside it:
concatenated in order), and a repeated scalar is read packed or not. So the bytes
parsed as :data:`_MERGED` (``changes`` declared singular, down to a ``Value`` whose
kinds are declared repeated) give each kind's values of every key and every new value
as one list, in order, made in C: for a key of one ``long`` field, ``key.fields.int``
is that column. The other reading, :data:`_PARTITIONS`, gives each change's partition
(a zero is not on the wire, so the merged list would not say whose it is).

The columns are trusted only when the counts prove them: every change has a type,
each key (and each upsert's value) has exactly one value of its field's kind per
field and nothing else (no null but in a ``void`` field, no nested or unknown
value); else :meth:`MergedChanges.columns` returns None and the caller decodes the
message as declared. Counts cannot tell which row a value came from: a row's
fields of different kinds are placed by the schema's order, and the values by the
changes' types (a delete's record has no value). That is how the daemon writes them
(``epochstate.daemon.codec.wire`` writes every value in its type's kind; a removed
key's record is cleared of its value).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from epochstate.client.arrow.batches import ChangeArrays
from epochstate.client.arrow.columns import KINDS, struct_of
from epochstate.client.client import StoreSchema
from epochstate.core.sparktypes import AtomicType, StructType
from epochstate.v1 import epochstate_pb2 as pb

_UPSERT = pb.Change.Type.UPSERT
_DELETE = pb.Change.Type.DELETE
_KIND_NAMES = {_UPSERT: "upsert", _DELETE: "delete"}
_PARTITION = attrgetter("record.partition")
_NULL = "null"
# The field MergedChanges.header leaves out.
_HEADLESS = ("changes",)


def _view_file() -> descriptor_pb2.FileDescriptorProto:
    """The two readings, derived from the declared messages' field numbers and types."""
    field = descriptor_pb2.FieldDescriptorProto
    repeated, singular = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    view = descriptor_pb2.FileDescriptorProto(
        name="epochstate/v1/changes_views.proto", package="epochstate.views", syntax="proto2"
    )

    def message(name: str, fields: Sequence[tuple[str, int, int, int, str]]) -> None:
        declared = view.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            added = declared.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                added.type_name = f".epochstate.views.{type_name}"

    # A nested value (struct, array, map) is read as bytes: only counted.
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
        ],
    )
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
        "Merged",
        [
            (f.name, f.number, f.type, singular, "")
            for f in pb.ChangesResponse.DESCRIPTOR.fields
            if f.name not in _HEADLESS
        ]
        + [("changes", response["changes"].number, field.TYPE_MESSAGE, singular, "Changes")],
    )
    message("Partition", [("partition", record["partition"].number, field.TYPE_INT32, singular, "")])
    message("PartitionOf", [("record", change["record"].number, field.TYPE_MESSAGE, singular, "Partition")])
    message(
        "Partitions", [("changes", response["changes"].number, field.TYPE_MESSAGE, repeated, "PartitionOf")]
    )
    return view


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_view_file())
_MERGED: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("epochstate.views.Merged"))
_PARTITIONS: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("epochstate.views.Partitions"))
_HEADER_FIELDS = tuple(f.name for f in pb.ChangesResponse.DESCRIPTOR.fields if f.name not in _HEADLESS)
_VALUE_KINDS = tuple(f.name for f in pb.Value.DESCRIPTOR.fields)


class MergedChanges:
    """A serialized ``ChangesResponse`` read merged: its header, and its changes' columns."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._merged = _MERGED.FromString(data)
        self.header = pb.ChangesResponse()
        """The response without its changes."""
        for name in _HEADER_FIELDS:
            if self._merged.HasField(name):
                setattr(self.header, name, getattr(self._merged, name))

    def columns(self, store: StoreSchema, schema: pa.Schema) -> ChangeArrays | None:
        """The columns of the changes, of ``store`` (``schema``:
        :func:`~epochstate.client.arrow.types.changes_schema` of it), or None when the
        counts do not prove them (see the module docstring)."""
        return _columns(self._merged.changes, self.data, store, schema)


def _columns(merged: Any, data: bytes, store: StoreSchema, schema: pa.Schema) -> ChangeArrays | None:
    key_kinds, value_kinds = _kinds(store.key), _kinds(store.value)
    if key_kinds is None or value_kinds is None:
        return None
    partitions = list(map(_PARTITION, _PARTITIONS.FromString(data).changes))
    count = len(partitions)
    types = list(merged.type)
    deletes = types.count(_DELETE)
    if len(types) != count or types.count(_UPSERT) + deletes != count:
        return None
    keys = _fields(merged.record.key.fields, key_kinds, count)
    values = _fields(merged.record.value.fields, value_kinds, count - deletes)
    if keys is None or values is None:
        return None
    deleted = [t == _DELETE for t in types] if deletes else None
    if deleted is not None:
        values = [_spread(v, deleted) for v in values]
    key_type, value_type = schema.field("key").type, schema.field("value").type
    return ChangeArrays(
        pa.array(list(map(_KIND_NAMES.__getitem__, types)), type=pa.string()),
        struct_of([pa.array(k, type=t.type) for k, t in zip(keys, key_type, strict=True)], key_type, count),
        struct_of(
            [pa.array(v, type=t.type) for v, t in zip(values, value_type, strict=True)],
            value_type,
            count,
            deleted,
        ),
        pa.array(partitions, type=pa.int32()),
    )


def _kinds(row: StructType) -> list[str] | None:
    """The ``Value`` kind each field of ``row`` is sent in; None when one is not atomic."""
    out: list[str] = []
    for f in row.fields:
        if not isinstance(f.type, AtomicType):
            return None
        if f.type.name == _NULL:
            out.append(_NULL)  # a void field's every value is a null
        elif f.type.name in KINDS:
            out.append(KINDS[f.type.name][0])
        else:
            return None
    return out


def _fields(values: Message, kinds: list[str], rows: int) -> list[list[Any]] | None:
    """Each field's values of ``rows`` rows whose fields are sent in ``kinds``, from their
    merged ``values``; None unless each kind holds exactly one value per field of it and
    row, and no other kind any."""
    width = {kind: kinds.count(kind) for kind in kinds}
    if any(len(getattr(values, kind)) != rows * width.get(kind, 0) for kind in _VALUE_KINDS):
        return None
    lists = {kind: list(getattr(values, kind)) for kind in width}
    seen: dict[str, int] = {}
    out = []
    for kind in kinds:
        i = seen[kind] = seen.get(kind, -1) + 1
        if kind == _NULL:
            out.append([None] * rows)
        else:
            out.append(lists[kind] if width[kind] == 1 else lists[kind][i :: width[kind]])
    return out


def _spread(values: list[Any], deleted: list[bool]) -> list[Any]:
    """``values`` of the changes not ``deleted``, with None at each deleted one."""
    upserted = iter(values)
    return [None if d else next(upserted) for d in deleted]
