"""Record batches of a store's records and of its changes (see :mod:`.types` for the columns)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from operator import attrgetter
from typing import NamedTuple, Protocol

import pyarrow as pa  # type: ignore[import-untyped]

from epochstate.client.arrow.columns import struct_column
from epochstate.client.arrow.types import changes_schema, state_schema
from epochstate.client.client import StoreSchema
from epochstate.v1 import epochstate_pb2 as pb

_FOUND = attrgetter("found")
_DELETE = pb.Change.Type.DELETE
_KIND = {False: "upsert", True: "delete"}


class Change(Protocol):
    """One change of a feed of changes: what the key became at ``epoch``."""

    @property
    def epoch(self) -> int: ...
    @property
    def change_type(self) -> str:
        """``upsert`` or ``delete``."""
        ...

    @property
    def key(self) -> pb.Row: ...
    @property
    def value(self) -> pb.Row | None:
        """The new value; ignored for a delete."""
        ...

    @property
    def partition(self) -> int: ...


def with_epoch(schema: pa.Schema, epoch: int, query_id: str) -> pa.Schema:
    """``schema`` saying, in its metadata, which epoch of which query its rows are of."""
    return schema.with_metadata({"epochstate.epoch": str(epoch), "epochstate.query_id": query_id})


def state_batch(
    records: Sequence[pb.Record], store: StoreSchema, schema: pa.Schema | None = None
) -> pa.RecordBatch:
    """The batch of ``records`` (a Scan page's, or a MultiGet's) of ``store``; a record
    not found has a null ``value``. ``schema``: :func:`state_schema` of ``store``, with
    any metadata."""
    schema = schema or state_schema(store)
    keys: list[Sequence[pb.Value]] = []
    values: list[Sequence[pb.Value]] = []
    partitions: list[int] = []
    # One pass over the records: each access to one makes its Python object anew.
    for r in records:
        keys.append(r.key.fields)
        values.append(r.value.fields)
        partitions.append(r.partition)
    key = struct_column(keys, store.key, schema.field("key").type)
    value_type = schema.field("value").type
    if store.value.fields:
        # A found record's value has every field: an empty one is an absent value.
        value = struct_column(values, store.value, value_type, empty_is_null=True)
    else:
        value = struct_column(values, store.value, value_type, [not f for f in map(_FOUND, records)])
    partition = pa.array(partitions, type=pa.int32())
    return pa.RecordBatch.from_arrays([key, value, partition], schema=schema)


def changes_batch(
    changes: Sequence[Change], store: StoreSchema, schema: pa.Schema | None = None
) -> pa.RecordBatch:
    """The batch of ``changes`` of ``store`` (:func:`changes_schema`: a delete's value is null)."""
    schema = schema or changes_schema(store)
    deleted = [c.change_type == "delete" or c.value is None for c in changes]
    key = struct_column([c.key.fields for c in changes], store.key, schema.field("key").type)
    values = [() if d or c.value is None else c.value.fields for c, d in zip(changes, deleted, strict=True)]
    value = struct_column(values, store.value, schema.field("value").type, deleted)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([c.epoch for c in changes], type=pa.int64()),
            pa.array([c.change_type for c in changes], type=pa.string()),
            key,
            value,
            pa.array([c.partition for c in changes], type=pa.int32()),
        ],
        schema=schema,
    )


class ChangeArrays(NamedTuple):
    """The columns of some changes of one epoch but its ``epoch`` (see :func:`changes_batch`)."""

    change_type: pa.Array
    key: pa.StructArray
    value: pa.StructArray
    partition: pa.Array


def wire_changes_batch(
    epoch: int, changes: Sequence[pb.Change], store: StoreSchema, schema: pa.Schema | None = None
) -> pa.RecordBatch:
    """:func:`changes_batch` of ``changes``, the ``Change`` messages of one epoch as a
    Changes stream sends them, read column by column (no object made per change)."""
    schema = schema or changes_schema(store)
    return epoch_changes_batch(epoch, [wire_change_arrays(changes, store, schema)], schema)


def wire_change_arrays(changes: Sequence[pb.Change], store: StoreSchema, schema: pa.Schema) -> ChangeArrays:
    """The columns of ``changes`` (``Change`` messages) of ``store``; ``schema``:
    :func:`changes_schema` of it."""
    keys: list[Sequence[pb.Value]] = []
    values: list[Sequence[pb.Value]] = []
    partitions: list[int] = []
    deleted: list[bool] = []
    # One pass, as state_batch: each access to a change's record makes its Python object anew.
    for change in changes:
        record = change.record
        removed = change.type == _DELETE
        deleted.append(removed)
        keys.append(record.key.fields)
        values.append(() if removed else record.value.fields)
        partitions.append(record.partition)
    return ChangeArrays(
        # Not pyarrow.compute's if_else: importing it costs a client process 0.1 s.
        pa.array([_KIND[d] for d in deleted], type=pa.string()),
        struct_column(keys, store.key, schema.field("key").type),
        struct_column(values, store.value, schema.field("value").type, deleted),
        pa.array(partitions, type=pa.int32()),
    )


def epoch_changes_batch(epoch: int, parts: Sequence[ChangeArrays], schema: pa.Schema) -> pa.RecordBatch:
    """The batch of the changes of ``epoch`` whose columns ``parts`` hold, in order."""
    whole = (
        parts[0]
        if len(parts) == 1
        else ChangeArrays(*[pa.concat_arrays(list(c)) for c in zip(*parts, strict=True)])
    )
    rows = len(whole.partition)
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(epoch, type=pa.int64()), rows), *whole], schema=schema
    )


def changes_batches(
    changes: Iterable[Change], store: StoreSchema, *, rows: int = 10_000
) -> Iterator[pa.RecordBatch]:
    """:func:`changes_batch` of ``changes`` (a feed, read as it comes) ``rows`` at a time;
    nothing when there are none."""
    schema = changes_schema(store)
    it = iter(changes)
    while chunk := list(islice(it, rows)):
        yield changes_batch(chunk, store, schema)
