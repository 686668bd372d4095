"""State over time, as the client returns it: a key's history and each epoch's changes.

Plain frozen values, decoded with the store's schema of the epoch they are of
(``key``/``value`` are :class:`~epochstate.client.structs.Struct`), so that other
modules (the Arrow conversion, the CLI's writers) consume them without gRPC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from epochstate.client import merged
from epochstate.client.structs import Struct
from epochstate.client.values import from_row
from epochstate.core.sparktypes import StructType
from epochstate.v1 import epochstate_pb2 as pb

ChangeType = Literal["upsert", "delete"]


@dataclass(frozen=True)
class KeyVersion:
    """One version of a key: valid from epoch ``valid_from`` until (not including)
    ``valid_to`` (None: still valid at the range's last epoch). A deletion has
    ``deleted`` set and no value: the key is absent from ``valid_from`` on."""

    key: Struct
    value: Struct | None
    deleted: bool
    valid_from: int
    valid_to: int | None
    partition: int | None


@dataclass(frozen=True)
class KeyHistory:
    """Every version of one key valid at some epoch of ``[from_epoch, to_epoch]``, oldest
    first. The answer for a range of queryable epochs never changes."""

    job: str
    from_epoch: int
    to_epoch: int
    query_id: str
    versions: tuple[KeyVersion, ...]

    def value_at(self, epoch: int) -> Struct | None:
        """The key's value at ``epoch`` of the range (None: absent)."""
        for v in self.versions:
            if v.valid_from <= epoch and (v.valid_to is None or epoch < v.valid_to):
                return None if v.deleted else v.value
        return None


@dataclass(frozen=True)
class Change:
    """A key one epoch changed: ``upsert`` with its new value, or ``delete``."""

    epoch: int
    type: ChangeType
    key: Struct
    value: Struct | None
    partition: int | None


@dataclass(frozen=True)
class EpochChanges:
    """Every change of one epoch, in key order: the epoch is complete."""

    epoch: int
    changes: tuple[Change, ...]
    committed_at_ms: int
    query_id: str


Schemas = Callable[[int], tuple[StructType, StructType]]
"""(key schema, value schema) of the store at an epoch."""


def versions_of(response: pb.HistoryResponse, schemas: Schemas) -> list[KeyVersion]:
    out = []
    for v in response.versions:
        key_schema, value_schema = schemas(v.valid_from_epoch)
        record = v.record
        out.append(
            KeyVersion(
                key=from_row(record.key, key_schema),
                value=None if v.deleted else from_row(record.value, value_schema),
                deleted=v.deleted,
                valid_from=v.valid_from_epoch,
                valid_to=v.valid_to_epoch if v.HasField("valid_to_epoch") else None,
                partition=record.partition if record.found or v.deleted else None,
            )
        )
    return out


def change_of(epoch: int, change: pb.Change, key_schema: StructType, value_schema: StructType) -> Change:
    deleted = change.type == pb.Change.Type.DELETE
    record = change.record
    return Change(
        epoch=epoch,
        type="delete" if deleted else "upsert",
        key=from_row(record.key, key_schema),
        value=None if deleted else from_row(record.value, value_schema),
        partition=record.partition,
    )


# From how many changes a message's are decoded merged (one parse of them all, see
# epochstate.client.merged): below, its fixed cost exceeds what it saves. Only a message
# that names the shape its records are in is (as for reads, see client._lookups).
_MERGED_FROM = 4
_UPSERT = pb.Change.Type.UPSERT
_DELETE = pb.Change.Type.DELETE
_TYPE_NAMES: dict[int, ChangeType] = {_UPSERT: "upsert", _DELETE: "delete"}


def changes_of(message: pb.ChangesResponse, key_schema: StructType, value_schema: StructType) -> list[Change]:
    """The changes of one Changes message, decoded with the schemas of its epoch."""
    epoch = message.epoch
    count = len(message.changes)
    if count >= _MERGED_FROM and message.HasField("shape_first_epoch"):
        read = _merged_changes(message.SerializeToString(), count, key_schema, value_schema)
        if read is not None:
            return merged.instances(
                Change,
                (
                    {"epoch": epoch, "type": kind, "key": key, "value": value, "partition": partition}
                    for kind, key, value, partition in zip(*read, strict=True)
                ),
            )
    return [change_of(epoch, c, key_schema, value_schema) for c in message.changes]


def _merged_changes(
    data: bytes, count: int, key_schema: StructType, value_schema: StructType
) -> tuple[list[ChangeType], list[Struct], list[Struct | None], list[int]] | None:
    """The types, keys, values (None for a delete) and partitions of the ``count`` changes
    of ``data``, a serialized ChangesResponse; None when the counts do not prove them (every
    change has a type, and its rows as :mod:`epochstate.client.merged` requires)."""
    changes = merged.MERGED_CHANGES.FromString(data).changes
    types = list(changes.type)
    deletes = types.count(_DELETE)
    if len(types) != count or types.count(_UPSERT) + deletes != count:
        return None
    record = changes.record
    partitions = record.partition[:] or [0] * count  # none on the wire: every one is 0
    if deletes or len(partitions) != count:
        # A zero is not on the wire: whose it is, per change; and which changes have a value.
        per_change = [c.record for c in merged.PARTITIONS.FromString(data).changes]
        partitions = [r.partition for r in per_change]
        if deletes and [r.HasField("value") for r in per_change] != [t == _UPSERT for t in types]:
            return None  # a delete with a value, or an upsert without one
    raw = merged.once(lambda: merged.RAW_CHANGES.FromString(data).changes.record)
    keys = merged.decoder(key_schema).rows(record.key.fields, count, lambda: raw().key.fields)
    values = merged.decoder(value_schema).rows(
        record.value.fields, count - deletes, lambda: raw().value.fields
    )
    if keys is None or values is None:
        return None
    if not deletes:
        upserted: list[Struct | None] = list(values)
        return [_TYPE_NAMES[_UPSERT]] * count, keys, upserted, partitions
    return (
        list(map(_TYPE_NAMES.__getitem__, types)),
        keys,
        merged.spread(values, [t == _UPSERT for t in types]),
        partitions,
    )


def whole_epochs(
    messages: Iterable[pb.ChangesResponse], schemas: Callable[[pb.ChangesResponse], Schemas]
) -> Iterator[EpochChanges]:
    """The messages of a Changes stream gathered into whole epochs, each yielded once
    its end-of-epoch marker arrived. ``schemas(message)`` gives the schemas to decode a
    message's records with."""
    pending: list[Change] = []
    for message in messages:
        if message.epoch_complete:
            yield EpochChanges(message.epoch, tuple(pending), message.committed_at_ms, message.query_id)
            pending = []
            continue
        key_schema, value_schema = schemas(message)(message.epoch)
        pending.extend(changes_of(message, key_schema, value_schema))


def changes_request(
    job: str,
    *,
    from_epoch: int,
    to_epoch: int | None,
    follow: bool,
    operator_id: int,
    store: str,
    query_id: str | None,
    page_size: int,
) -> pb.ChangesRequest:
    """The request of a feed of changes (``to_epoch`` None: left unset, the newest
    queryable when the call starts, or none with ``follow``)."""
    request = pb.ChangesRequest(
        store=pb.StoreRef(job=job, operator_id=operator_id, store=store, query_id=query_id or ""),
        from_epoch=from_epoch,
        follow=follow,
        limit=page_size,
    )
    if to_epoch is not None:
        request.to_epoch = to_epoch
    return request


def history_request(
    job: str,
    key: pb.Row,
    *,
    from_epoch: int,
    to_epoch: int | None,
    wait: bool,
    operator_id: int,
    store: str,
    query_id: str | None,
    page_size: int,
) -> pb.HistoryRequest:
    """The first request of a key's history (``to_epoch`` None: left unset, the newest
    queryable); :func:`next_history_page` turns it into the next page's."""
    request = pb.HistoryRequest(
        store=pb.StoreRef(job=job, operator_id=operator_id, store=store, query_id=query_id or ""),
        key=key,
        from_epoch=from_epoch,
        wait=wait,
        limit=page_size,
    )
    if to_epoch is not None:
        request.to_epoch = to_epoch
    return request


def next_history_page(request: pb.HistoryRequest, response: pb.HistoryResponse) -> bool:
    """Point ``request`` at the page after ``response``, pinned to the range's end the first
    page resolved; False when ``response`` was the last page."""
    if not response.HasField("next_from_epoch"):
        return False
    request.from_epoch = response.next_from_epoch
    request.to_epoch = response.to_epoch
    return True
