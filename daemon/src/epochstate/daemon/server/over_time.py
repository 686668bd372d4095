"""History and Changes: the read contract over a range of epochs.

Both read one store of one job through one :class:`StoreView` per answer (History)
or per group of epochs (Changes), so each answer is consistent with one instant of
the store. What makes their answers repeatable:

* a version valid before ``from_epoch`` is reported from ``from_epoch``, and a
  deletion only when it happened after ``from_epoch``, so the answer does not
  depend on what a replica retained, or loaded whole, before the range;
* a version is open (no ``valid_to_epoch``) when it is still valid at the range's
  last epoch, whatever later epochs did;
* the changes of an epoch are known only when the state before it is retained
  (:func:`~epochstate.daemon.store.history.first_changes_epoch`); an older start
  is refused with EPOCH_RETIRED, never answered with a shorter feed;
* an epoch skipped as unreadable is refused with EPOCH_UNAVAILABLE (the versions
  stored after it hold its changes too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from epochstate.core import reasons
from epochstate.core.errors import BadRequest, EpochStateError
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.codec.wire import int64, varint
from epochstate.daemon.server.epochs import EpochRetired, EpochUnavailable
from epochstate.daemon.store import history
from epochstate.daemon.store.catalog import StoreSchema
from epochstate.daemon.store.descriptors import JobProgress
from epochstate.daemon.store.view import StoreView
from epochstate.v1 import epochstate_pb2 as pb

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
# Epochs whose changes one walk over a store collects (each walk reads the whole store).
EPOCHS_PER_WALK = 64
# A Changes message is sent once its records reach this size (gRPC's own limit, far
# above it, would end the call without a reason).
MESSAGE_BYTES = 4 << 20
# A Change's type (field 1) and the tag of its record (field 2, length-delimited).
_UPSERT = b"\x08" + bytes([pb.Change.Type.UPSERT]) + b"\x12"
_DELETE = b"\x08" + bytes([pb.Change.Type.DELETE]) + b"\x12"


class BadRange(EpochStateError):
    reason = reasons.BAD_RANGE


def check_range(from_epoch: int, to_epoch: int | None, follow: bool = False) -> None:
    """Refuse a malformed range (BAD_RANGE)."""
    if from_epoch < 0:
        raise BadRange(f"from_epoch must be >= 0, got {from_epoch}")
    if to_epoch is not None and to_epoch < from_epoch:
        raise BadRange(f"to_epoch {to_epoch} is before from_epoch {from_epoch}")
    if to_epoch is not None and follow:
        raise BadRange("to_epoch and follow exclude each other: a followed stream has no last epoch")


def limit_of(limit: int) -> int:
    """A request's page size: 0 is the default; BAD_REQUEST outside 0..MAX_LIMIT."""
    if limit < 0 or limit > MAX_LIMIT:
        raise BadRequest(f"limit must be within 0..{MAX_LIMIT}, got {limit}")
    return limit or DEFAULT_LIMIT


def _range_text(progress: JobProgress, first: int) -> str:
    if progress.empty:
        return "nothing is queryable yet"
    return f"they are known for epochs {first}..{progress.newest}"


def check_retained(job: str, start: int, progress: JobProgress, what: str, *, changes: bool) -> None:
    """Refuse a range starting before what the view retains (EPOCH_RETIRED, with the
    range that is queryable: for changes, from the epoch after the oldest retained)."""
    first = history.first_changes_epoch(progress) if changes else progress.oldest
    if start >= first:
        return
    metadata = {"job": job, "epoch": str(start)}
    if not progress.empty:
        metadata |= {"oldestEpoch": str(first), "newestEpoch": str(progress.newest)}
    raise EpochRetired(
        f"{what} of job {job!r} from epoch {start} reach before retention; {_range_text(progress, first)}",
        metadata=metadata,
    )


def check_available(job: str, first: int, last: int, unavailable: Mapping[int, str]) -> None:
    """Refuse a range holding an epoch skipped as unreadable (EPOCH_UNAVAILABLE)."""
    skipped = sorted(e for e in unavailable if first <= e <= last)
    if skipped:
        raise EpochUnavailable(
            f"epoch {skipped[0]} of job {job!r} cannot be served: {unavailable[skipped[0]]}",
            metadata={"job": job, "epoch": str(skipped[0])},
        )


def _deleted_record(before: bytes | None, encoded_key: bytes, schema: StoreSchema) -> pb.Record:
    """The record of a removed key: its key and the partition it was in (from the
    version the removal superseded), found = false."""
    if before is not None:
        record = pb.Record.FromString(before)
        record.ClearField("value")
        record.found = False
        return record
    encoder = RecordEncoder(schema.key, schema.value)
    return pb.Record.FromString(encoder.absent(tuple(schema.decode_key(encoded_key))))


def history_response(
    view: StoreView,
    store_id: int,
    encoded_key: bytes,
    first: int,
    last: int,
    limit: int,
    schema_at: Callable[[int], StoreSchema],
    query_id: str,
) -> pb.HistoryResponse:
    """The versions of one key valid at some epoch of ``[first, last]``, oldest first,
    at most ``limit`` (then ``next_from_epoch`` says where the rest starts)."""
    chain: list[history.StoredVersion] = []
    for stored in history.versions(view, store_id, encoded_key, last):
        chain.append(stored)
        if stored.epoch <= first:
            break  # the version valid at `first`: nothing older is in the range
    found: list[pb.KeyVersion] = []
    valid_to: int | None = None
    for i, (epoch, payload) in enumerate(chain):
        if payload is None and epoch <= first:
            break  # absent at `first`: a deletion before the range is no version of it
        version = pb.KeyVersion(valid_from_epoch=max(epoch, first), deleted=payload is None)
        if valid_to is not None:
            version.valid_to_epoch = valid_to
        if payload is not None:
            version.record.ParseFromString(payload)
        else:
            older = chain[i + 1].payload if i + 1 < len(chain) else None
            version.record.CopyFrom(_deleted_record(older, encoded_key, schema_at(epoch)))
        found.append(version)
        valid_to = epoch
    found.reverse()
    response = pb.HistoryResponse(from_epoch=first, to_epoch=last, query_id=query_id)
    if len(found) > limit:
        # The next page starts with the version valid at its from_epoch: never a
        # deletion, which a range reports only after its from_epoch.
        cut = limit
        if found[cut].deleted:
            cut = cut - 1 if cut > 1 else cut + 1
        if cut < len(found):
            response.next_from_epoch = found[cut].valid_from_epoch
            found = found[:cut]
    response.versions.extend(found)
    return response


def _frame(kind: bytes, length: int) -> bytes:
    """What precedes a record of ``length`` bytes in a ChangesResponse: the tag and length
    of its Change (field 2), the change's ``kind`` and its record's tag, the record's length."""
    record_length = varint(length)
    return b"\x12" + varint(len(kind) + len(record_length) + length) + kind + record_length


def epoch_messages(
    epoch: int,
    changed: list[history.ChangedKey],
    schema: StoreSchema,
    limit: int,
    query_id: str,
    committed_at_ms: int,
) -> Iterator[bytes]:
    """One epoch's changes as serialized ``ChangesResponse`` messages of at most ``limit``
    changes, then its marker. The stored records are framed as they are (no message is
    built per change), in the bytes protobuf itself would write."""
    query = query_id.encode()
    # What follows the changes in each message: query_id (4), shape_first_epoch (5).
    tail = (b"\x22" + varint(len(query)) + query if query else b"") + b"\x28" + int64(schema.first_epoch)
    head = b"\x08" + int64(epoch) if epoch else b""
    parts = [head]
    count = size = 0
    # An upsert's framing depends on its record's length only: made once per length.
    upserts: dict[int, bytes] = {}
    for change in changed:
        record = change.payload
        if record is not None:
            length = len(record)
            frame = upserts.get(length)
            if frame is None:
                frame = upserts[length] = _frame(_UPSERT, length)
            size += length
        else:
            record = _deleted_record(change.before, change.encoded_key, schema).SerializeToString()
            frame = _frame(_DELETE, len(record))
            size += len(change.encoded_key)
        parts += (frame, record)
        count += 1
        if count >= limit or size >= MESSAGE_BYTES:
            yield b"".join((*parts, tail))
            parts, count, size = [head], 0, 0
    if count:
        yield b"".join((*parts, tail))
    yield pb.ChangesResponse(
        epoch=epoch,
        query_id=query_id,
        epoch_complete=True,
        shape_first_epoch=schema.first_epoch,
        committed_at_ms=committed_at_ms,
    ).SerializeToString()
