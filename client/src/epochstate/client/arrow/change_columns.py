"""The columns of a Changes message read in one parse, without an object per change.

The message's bytes are read through the merged views of :mod:`epochstate.client.merged`
(whose docstring says why the readings agree): :data:`~epochstate.client.merged.MERGED_CHANGES`
gives each kind's values of every key and every new value as one list, made in C, and
:data:`~epochstate.client.merged.PARTITIONS` each change's partition (a zero is not on the
wire, so the merged list would not say whose it is). Here they become Arrow arrays.

The columns are trusted only when the counts prove them: every change has a type,
each key (and each upsert's value) has exactly one value of its field's kind per
field and nothing else (no null but in a ``void`` field, no nested or unknown
value); else :meth:`MergedChanges.columns` returns None and the caller decodes the
message as declared. The values are placed by the changes' types (a delete's record
has no value: the daemon clears a removed key's record of its value).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from epochstate.client.arrow.batches import ChangeArrays
from epochstate.client.arrow.columns import KINDS, struct_of
from epochstate.client.client import StoreSchema
from epochstate.client.merged import HEADLESS, MERGED_CHANGES, NULL, PARTITIONS, columns, spread
from epochstate.core.sparktypes import AtomicType, StructType
from epochstate.v1 import epochstate_pb2 as pb

_UPSERT = pb.Change.Type.UPSERT
_DELETE = pb.Change.Type.DELETE
_KIND_NAMES = {_UPSERT: "upsert", _DELETE: "delete"}
_PARTITION = attrgetter("record.partition")
# The fields of the response MergedChanges.header holds (all but its changes).
_HEADER_FIELDS = tuple(f.name for f in pb.ChangesResponse.DESCRIPTOR.fields if f.name not in HEADLESS)


class MergedChanges:
    """A serialized ``ChangesResponse`` read merged: its header, and its changes' columns."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._merged = MERGED_CHANGES.FromString(data)
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
    partitions = list(map(_PARTITION, PARTITIONS.FromString(data).changes))
    count = len(partitions)
    types = list(merged.type)
    deletes = types.count(_DELETE)
    if len(types) != count or types.count(_UPSERT) + deletes != count:
        return None
    keys = columns(merged.record.key.fields, key_kinds, count)
    values = columns(merged.record.value.fields, value_kinds, count - deletes)
    if keys is None or values is None:
        return None
    deleted = [t == _DELETE for t in types] if deletes else None
    if deleted is not None:
        upserted = [not d for d in deleted]
        values = [spread(v, upserted) for v in values]
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
        if f.type.name == NULL:
            out.append(NULL)  # a void field's every value is a null
        elif f.type.name in KINDS:
            out.append(KINDS[f.type.name][0])
        else:
            return None
    return out
