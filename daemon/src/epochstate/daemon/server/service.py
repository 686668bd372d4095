"""The ``epochstate.v1.EpochState`` servicer.

Dependencies come through the constructor. Every handler runs inside
``status.domain_errors``, which turns domain errors into status codes (one
table, ``status.py``); nothing else aborts a call. The reads (Get, MultiGet, Scan,
History, the messages of Changes) return their responses as wire bytes: the store
keeps each row as a serialized ``Record``, so a response is framed around stored
bytes and never built as message objects (:mod:`epochstate.daemon.server.handlers`
registers them without a serializer).
"""

from __future__ import annotations

import json
import logging
import math
import struct
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, cast

import grpc

from epochstate.core.alias.chain import AliasChain
from epochstate.core.errors import EpochStateError
from epochstate.core.sparktypes import StructType, type_to_json
from epochstate.daemon.codec import keycodec
from epochstate.daemon.codec.records import RecordEncoder, one_record_response, response_bytes, response_tail
from epochstate.daemon.server import epochs, over_time
from epochstate.daemon.server.alias_epochs import AliasTarget
from epochstate.daemon.server.aliases import Aliases
from epochstate.daemon.server.held_partitions import check_held
from epochstate.daemon.server.limits import may_wait
from epochstate.daemon.server.reported_jobs import ReportedJobs
from epochstate.daemon.server.status import BadRequest, abort, domain_errors, has_deadline, wait_budget
from epochstate.daemon.server.values import KeyEncoder, key_from_proto
from epochstate.daemon.store import history, layout
from epochstate.daemon.store.catalog import (
    Catalog,
    JobEntry,
    JobNotFound,
    StoreHandle,
    StoreNotFound,
    StoreSchema,
    WaitAbandoned,
)
from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.errors import StoreDamaged
from epochstate.daemon.store.reads import StoreReads
from epochstate.daemon.store.view_pool import ReadViews
from epochstate.v1 import epochstate_pb2 as pb

log = logging.getLogger(__name__)

MAX_KEY_BYTES = 64 * 1024
MAX_KEYS_PER_CALL = 10_000
DEFAULT_PAGE = 1000
MAX_PAGE = 10_000
# A page token: a format byte, the epoch of the scan's first page, the length of the
# query id it read (a recreated checkpoint's query has another), the query id, then
# the last key returned. The query id rather than the daemon's own job id, so a token
# stays valid on every replica of the same query.
_TOKEN_FORMAT = 2
_TOKEN = struct.Struct(">BqB")


class IngestControl(Protocol):
    """What the service asks of the ingest loop."""

    def follow(self, job: str, checkpoint: str) -> JobEntry: ...

    def poke(self, job: str, epoch: int | None = None, run_id: str = "", query_id: str = "") -> None: ...


def _schema(struct_type: StructType) -> pb.Schema:
    return pb.Schema(
        fields=[
            pb.Field(name=f.name, type_json=json.dumps(type_to_json(f.type)), nullable=f.nullable)
            for f in struct_type.fields
        ]
    )


def _page_token(token: bytes) -> tuple[int, str, bytes]:
    """The epoch, query id and last key a page token carries; BadRequest if it is none."""
    if len(token) < _TOKEN.size or token[0] != _TOKEN_FORMAT:
        raise BadRequest("page_token is malformed (or from an older daemon: scan again)")
    _, epoch, length = _TOKEN.unpack_from(token)
    end = _TOKEN.size + length
    try:
        query_id = token[_TOKEN.size : end].decode()
    except UnicodeDecodeError:
        query_id = ""
    if len(token) < end or not query_id:
        raise BadRequest("page_token is malformed")
    return epoch, query_id, token[end:]


def _scan_bounds(request: pb.ScanRequest, schema: StoreSchema) -> tuple[bytes, bytes | None]:
    """The encoded key range ``[lower, upper)`` a scan covers, under ``schema``'s key."""
    prefix = keycodec.encode_fields(key_from_proto(request.prefix, schema.key, partial=True))
    lower, upper = prefix, layout.prefix_end(prefix) if prefix else None
    if request.HasField("start"):
        lower = max(lower, keycodec.encode_fields(key_from_proto(request.start, schema.key, partial=True)))
    if request.HasField("end"):
        end = keycodec.encode_fields(key_from_proto(request.end, schema.key, partial=True))
        upper = end if upper is None else min(upper, end)
    return lower, upper


def epoch_info(record: EpochRecord, query_id: str) -> pb.EpochInfo:
    return pb.EpochInfo(
        epoch=record.epoch,
        query_id=query_id,
        committed_at_ms=record.committed_at_ms,
        ingested_at_ms=record.ingested_at_ms,
        watermark_ms=record.watermark_ms,
        sources=[
            pb.SourcePosition(
                source=s.source,
                start_offset_json=s.start_offset_json or "",
                end_offset_json=s.end_offset_json or "",
            )
            for s in record.sources
        ],
    )


def _answered_by(target: AliasTarget | None, job_epoch: int) -> dict[str, Any]:
    """The response fields saying which job answered a read of an alias (none for a job)."""
    return {} if target is None else {"job": target.job, "job_epoch": job_epoch}


class _Codecs:
    """Per store schema version: the request-key encoder and the record encoder,
    compiled once."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int], tuple[KeyEncoder, RecordEncoder]] = {}

    def of(self, handle: StoreHandle, schema: StoreSchema) -> tuple[KeyEncoder, RecordEncoder]:
        cache_key = (handle.descriptor.store_id, schema.first_epoch)
        found = self._cache.get(cache_key)
        if found is None:
            found = (KeyEncoder(schema.key), RecordEncoder(schema.key, schema.value))
            self._cache[cache_key] = found
        return found


class EpochStateService:
    """Epoch-pinned reads over the daemon's store."""

    def __init__(
        self,
        store: StoreReads,
        catalog: Catalog,
        ingest: IngestControl,
        alignment: epochs.AlignedEpochs | None = None,
        max_wait: float | None = None,
        reported: ReportedJobs | None = None,
        views: ReadViews | None = None,
        aliases: Aliases | None = None,
    ) -> None:
        """``max_wait``: seconds a read without a deadline may wait for its epoch (None: for ever).
        ``reported``: the daemon's group, where a report naming a checkpoint defines its job
        (None: no group; such a report makes this daemon follow the job itself).
        ``views``: where reads take their views of ``store`` (None: fresh ones of it; a
        reader of a secondary passes its catalog's, capped at what the catalog published).
        ``aliases``: the logical job names in ZooKeeper (None: no ZooKeeper, names are jobs)."""
        self._reported = reported
        self._max_wait = max_wait
        self._store = store
        self._views = ReadViews(store) if views is None else views
        self._catalog = catalog
        self._ingest = ingest
        self._alignment = alignment
        self._codecs = _Codecs()
        self._aliases = aliases
        # (query id, shape's first epoch) -> the end of a Get's response (records.response_tail).
        self._tails: dict[tuple[str, int], bytes] = {}

    # -- helpers -------------------------------------------------------------

    def _pin(
        self, entry: JobEntry, selector: pb.EpochSelector, context: grpc.ServicerContext
    ) -> epochs.Pinned:
        # The deadline is asked only if the read waits (status.wait_budget: answer in time
        # so the caller gets our reason, not a bare timeout). A waiting read ends as soon as
        # its caller goes away, freeing its slot (limits.py): the call's end wakes the waits.
        if may_wait(selector) and not context.add_callback(self._catalog.wake):
            raise WaitAbandoned("the caller went away before the read began to wait")
        try:
            return epochs.resolve(
                self._views,
                self._catalog,
                entry,
                selector,
                lambda: wait_budget(context, self._max_wait),
                self._alignment,
                abandoned=lambda: not context.is_active(),
            )
        except epochs.EpochWaitTimedOut as error:
            if has_deadline(context):
                raise
            raise epochs.EpochWaitTimedOut(
                f"{error} (the call had no deadline: the daemon waits at most {self._max_wait:g} s)",
                metadata=error.metadata,
            ) from error

    def close(self) -> None:
        """Let go of the store's snapshots held for reads (before the store closes)."""
        self._views.clear()
        if self._aliases is not None:
            self._aliases.close()

    # -- names ---------------------------------------------------------------------

    def _named(self, name: str) -> JobEntry | AliasChain:
        """Where every call's job name is resolved: a job this daemon follows, or else an
        alias (its chain). A name that is both is refused (AmbiguousName); a name that is
        neither fails JobNotFound."""
        try:
            entry = self._catalog.get(name)
        except JobNotFound:
            chain = None if self._aliases is None else self._aliases.find(name)
            if chain is None:
                raise
            return chain
        if self._aliases is not None:
            self._aliases.check_job_name(name)
        return entry

    def _job(self, name: str, what: str) -> JobEntry:
        """The job ``name`` names, for ``what`` (a call not offered on aliases)."""
        named = self._named(name)
        if isinstance(named, AliasChain):
            jobs = ", ".join(dict.fromkeys(s.job for s in named.segments))
            raise BadRequest(f"{what} is not offered on alias {name!r}: name its jobs ({jobs})")
        return named

    def _aliased(
        self, ref: pb.StoreRef, selector: pb.EpochSelector, context: grpc.ServicerContext
    ) -> tuple[pb.StoreRef, pb.EpochSelector, AliasTarget | None]:
        """A read of an alias as the read of the job answering the epoch it selects, pinned to
        that job's epoch (waiting for it to be ingested when the alias read may wait), and the
        target to answer with; a read of a job as it is."""
        if not ref.job:
            raise BadRequest("store.job is required")
        named = self._named(ref.job)
        if self._aliases is not None and selector.WhichOneof("kind") == "aligned_with":
            selector = self._aliases.through_alias(selector, lambda: wait_budget(context, self._max_wait))
        if not isinstance(named, AliasChain):
            return ref, selector, None
        assert self._aliases is not None
        target = self._aliases.target(named, selector, lambda: wait_budget(context, self._max_wait))
        job_ref = pb.StoreRef()
        job_ref.CopyFrom(ref)
        job_ref.job = target.job
        return job_ref, pb.EpochSelector(exact=target.job_epoch, wait=may_wait(selector)), target

    def _handle(self, ref: pb.StoreRef, what: str = "") -> tuple[JobEntry, StoreHandle]:
        """The job and store a read names (``what``: a call not offered on aliases, whose
        name is resolved here; otherwise the caller resolved it, :meth:`_aliased`)."""
        if not ref.job:
            raise BadRequest("store.job is required")
        entry = self._job(ref.job, what) if what else self._catalog.get(ref.job)
        if ref.query_id and ref.query_id != entry.descriptor.query_id:
            raise epochs.IncarnationChanged.of(ref.job, ref.query_id, entry.descriptor.query_id, "the read")
        try:
            return entry, entry.store(ref.operator_id, ref.store)
        except StoreNotFound:
            if not entry.progress.empty:
                raise
            # Stores are known from the first ingested epoch: until then (a new job, or a
            # recreated checkpoint's new query) nothing is queryable yet, whatever the store.
            name = entry.descriptor.name
            raise epochs.EpochNotReady(
                f"job {name!r} has no queryable epoch yet (its stores are known from its first epoch)",
                metadata={"job": name},
            ) from None

    def _pinned_keys(
        self,
        entry: JobEntry,
        handle: StoreHandle,
        keys: Sequence[pb.Row],
        selector: pb.EpochSelector,
        context: grpc.ServicerContext,
    ) -> tuple[epochs.Pinned, StoreSchema, list[bytes]]:
        """Pin the read, and check the keys against the key schema in force at its epoch.

        A store with one schema checks keys first, so a bad key fails without waiting.
        """
        if len(handle.schemas) == 1:
            encoded = self._keys(handle, handle.latest, keys)
            pinned = self._pin(entry, selector, context)
            self._declared(handle, pinned)
            return pinned, handle.latest, encoded
        pinned = self._pin(entry, selector, context)
        self._declared(handle, pinned)
        schema = handle.schema_at(pinned.epoch)
        return pinned, schema, self._keys(handle, schema, keys)

    def _declared(self, handle: StoreHandle, pinned: epochs.Pinned) -> None:
        """Refuse a read at an epoch whose query has no such store (see
        :meth:`StoreHandle.check_declared`), letting go of the pinned view."""
        try:
            handle.check_declared(pinned.epoch)
        except StoreNotFound:
            self._views.done(pinned.view)
            raise

    def _keys(self, handle: StoreHandle, schema: StoreSchema, keys: Sequence[pb.Row]) -> list[bytes]:
        """The store encoding of each request key, checked against ``schema``'s key."""
        encoded = self._codecs.of(handle, schema)[0].encode_all(keys)
        longest = max(map(len, encoded), default=0)
        if longest > MAX_KEY_BYTES:
            raise BadRequest(f"key is {longest} bytes; the limit is {MAX_KEY_BYTES}")
        return encoded

    def _records(
        self, handle: StoreHandle, schema: StoreSchema, keys: Sequence[pb.Row], found: list[bytes | None]
    ) -> list[bytes]:
        """One serialized ``Record`` per request key: the stored one, or "absent" with the key."""
        if None not in found:
            return cast(list[bytes], found)
        keys_of, records = self._codecs.of(handle, schema)
        return [
            records.absent(keys_of.canonical(key)) if payload is None else payload
            for key, payload in zip(keys, found, strict=True)
        ]

    # -- reads ---------------------------------------------------------------

    @domain_errors
    def Get(self, request: pb.GetRequest, context: grpc.ServicerContext) -> bytes:
        """A serialized ``GetResponse``."""
        return self._get(request, context)

    def _get(self, request: pb.GetRequest, context: grpc.ServicerContext) -> bytes:
        """Get's read: :meth:`_exact_get` when it answers, else :meth:`_lookup`."""
        answer = self._exact_get(request, context)
        if answer is None:
            return self._lookup(request.store, [request.key], request.epoch, context)
        return answer

    def _exact_get(self, request: pb.GetRequest, context: grpc.ServicerContext) -> bytes | None:
        """The commonest Get, a key of a job's store at an exact epoch the store shows, with
        :meth:`_lookup`'s steps for it inlined: the same bytes, at a fraction of its calls.

        None when the read is anything else or would fail at a step the general path takes
        before the key's lookup (an alias, another query, an unknown store, a bad key, an
        epoch not queryable, a caller gone before a waiting read...): the general path then
        answers it from the start, errors included. Nothing done before that is seen by
        it (a view taken is given back; an ``add_callback`` refused registered nothing).
        What this raises, the lookup and the partition check, it raises where
        :meth:`_lookup` would, every earlier step of it having passed.
        """
        selector = request.epoch
        if selector.WhichOneof("kind") != "exact":
            return None
        ref = request.store
        entry = self._catalog.find(ref.job)
        if entry is None:
            return None
        if self._aliases is not None:
            self._aliases.check_job_name(ref.job)  # the general path's first step (_named) too
        descriptor = entry.descriptor
        if ref.query_id and ref.query_id != descriptor.query_id:
            return None
        handle = entry.stores.get((ref.operator_id, ref.store or "default"))
        if handle is None or len(handle.schemas) != 1:
            return None
        schema = handle.schemas[0]
        target = selector.exact
        if target < 0 or target in entry.unavailable or target < handle.descriptor.first_epoch:
            return None
        if schema.version.absent:
            return None
        keys_of, records = self._codecs.of(handle, schema)
        try:
            encoded = keys_of.encode_all((request.key,))
        except EpochStateError:
            return None
        if len(encoded[0]) > MAX_KEY_BYTES:
            return None
        views = self._views
        try:
            view = views.view()
            progress = view.progress(descriptor.job_id)
        except EpochStateError:
            # A closed or damaged store: the general path says so, or first that the
            # caller of a waiting read went away, as it checks that before its view.
            return None
        if progress.empty or not progress.oldest <= target <= progress.newest:
            views.done(view)
            return None
        if selector.wait and not context.add_callback(self._catalog.wake):
            views.done(view)
            return None
        found = view.payloads(handle.descriptor.store_id, encoded, target)
        views.done(view)
        if descriptor.partitions is not None:  # check_held's own first test, without its call
            check_held(entry, handle, schema, encoded, found)
        record = found[0]
        if record is None:
            record = records.absent(keys_of.canonical(request.key))
        shape = (descriptor.query_id, schema.first_epoch)
        tail = self._tails.get(shape)
        if tail is None:
            tail = self._tails[shape] = response_tail(*shape)
        return one_record_response(target, record, tail)

    @domain_errors
    def MultiGet(self, request: pb.MultiGetRequest, context: grpc.ServicerContext) -> bytes:
        """A serialized ``MultiGetResponse``."""
        return self._lookup(request.store, request.keys, request.epoch, context)

    def _lookup(
        self,
        ref: pb.StoreRef,
        keys: Sequence[pb.Row],
        selector: pb.EpochSelector,
        context: grpc.ServicerContext,
    ) -> bytes:
        """Get and MultiGet: ``keys`` of one store at one pinned epoch, as response bytes."""
        ref, selector, target = self._aliased(ref, selector, context)
        entry, handle = self._handle(ref)
        if len(keys) > MAX_KEYS_PER_CALL:
            raise BadRequest(f"{len(keys)} keys in one call; the limit is {MAX_KEYS_PER_CALL}")
        pinned, schema, encoded = self._pinned_keys(entry, handle, keys, selector, context)
        found = pinned.view.payloads(handle.descriptor.store_id, encoded, pinned.epoch)
        self._views.done(pinned.view)
        check_held(entry, handle, schema, encoded, found)  # never "absent" for a key not held here
        records = self._records(handle, schema, keys, found)
        return response_bytes(
            pinned.epoch if target is None else target.epoch,
            records,
            query_id=entry.descriptor.query_id,
            shape_first_epoch=schema.first_epoch,
            **_answered_by(target, pinned.epoch),
        )

    @domain_errors
    def Scan(self, request: pb.ScanRequest, context: grpc.ServicerContext) -> bytes:
        """A serialized ``ScanResponse``."""
        if request.limit < 0 or request.limit > MAX_PAGE:
            raise BadRequest(f"limit must be within 0..{MAX_PAGE}, got {request.limit}")
        limit = request.limit or DEFAULT_PAGE
        selector = request.epoch
        after: bytes | None = None
        token_query = ""
        if request.page_token:
            # The epoch of the first page: an alias's epoch for a scan of an alias, so that
            # the next page resolves to the same job and epoch.
            token_epoch, token_query, after = _page_token(request.page_token)
            selector = pb.EpochSelector(exact=token_epoch)
        ref, selector, target = self._aliased(request.store, selector, context)
        entry, handle = self._handle(ref)
        if token_query and token_query != entry.descriptor.query_id:
            # Never a page of another query: the job's checkpoint was recreated meanwhile.
            raise epochs.IncarnationChanged.of(
                ref.job, token_query, entry.descriptor.query_id, "the scan's page token"
            )
        if len(handle.schemas) == 1:
            lower, upper = _scan_bounds(request, handle.latest)
            pinned = self._pin(entry, selector, context)
            self._declared(handle, pinned)
        else:
            pinned = self._pin(entry, selector, context)
            self._declared(handle, pinned)
            lower, upper = _scan_bounds(request, handle.schema_at(pinned.epoch))
        versions = pinned.view.scan(handle.descriptor.store_id, pinned.epoch, lower, upper, limit, after)
        self._views.done(pinned.view)
        token = b""
        query_id = entry.descriptor.query_id
        epoch = pinned.epoch if target is None else target.epoch
        if len(versions) == limit:
            query = query_id.encode()
            token = _TOKEN.pack(_TOKEN_FORMAT, epoch, len(query)) + query + versions[-1].encoded_key
        shape = handle.schema_at(pinned.epoch).first_epoch
        payloads = [v.payload for v in versions]
        return response_bytes(
            epoch,
            payloads,
            token=token,
            query_id=query_id,
            shape_first_epoch=shape,
            **_answered_by(target, pinned.epoch),
        )

    # -- over time ---------------------------------------------------------------

    @domain_errors
    def History(self, request: pb.HistoryRequest, context: grpc.ServicerContext) -> bytes:
        """A serialized ``HistoryResponse`` (see :mod:`epochstate.daemon.server.over_time`)."""
        entry, handle = self._handle(request.store, "History")
        last = request.to_epoch if request.HasField("to_epoch") else None
        first = request.from_epoch
        over_time.check_range(first, last)
        limit = over_time.limit_of(request.limit)
        if last is None:
            selector = pb.EpochSelector(latest=True)
        else:
            selector = pb.EpochSelector(exact=last, wait=request.wait)
        pinned, schema, encoded = self._pinned_keys(entry, handle, [request.key], selector, context)
        name = entry.descriptor.name
        try:
            if first > pinned.epoch:
                raise epochs.EpochNotReady(
                    f"from_epoch {first} of job {name!r} is after its newest queryable epoch {pinned.epoch}",
                    metadata={"job": name, "epoch": str(first)},
                )
            progress = pinned.view.progress(entry.descriptor.job_id)
            over_time.check_retained(name, first, progress, "the history", changes=False)
            over_time.check_available(name, first, pinned.epoch, entry.unavailable)
            response = over_time.history_response(
                pinned.view,
                handle.descriptor.store_id,
                encoded[0],
                first,
                pinned.epoch,
                limit,
                handle.schema_at,
                entry.descriptor.query_id,
            )
        finally:
            self._views.done(pinned.view)
        check_held(entry, handle, schema, encoded, [b"" if response.versions else None])
        return response.SerializeToString()

    @domain_errors
    def Changes(self, request: pb.ChangesRequest, context: grpc.ServicerContext) -> Iterator[bytes]:
        """The changes of each epoch of the range (see :mod:`epochstate.daemon.server.over_time`),
        as serialized ``ChangesResponse`` messages; a bad range or a retired start fails the
        call before the stream starts."""
        entry, handle = self._handle(request.store, "Changes")
        last = request.to_epoch if request.HasField("to_epoch") else None
        first = request.from_epoch
        over_time.check_range(first, last, request.follow)
        limit = over_time.limit_of(request.limit)
        progress = self._store.progress(entry.descriptor.job_id)
        name = entry.descriptor.name
        if progress.empty:
            raise epochs.EpochNotReady(f"job {name!r} has no queryable epoch yet", metadata={"job": name})
        over_time.check_retained(name, first, progress, "the changes", changes=True)
        if last is None and not request.follow:
            last = progress.newest
        operator = (handle.descriptor.operator_id, handle.descriptor.store_name)
        # A stream waiting for its next epoch ends as soon as its caller goes away.
        context.add_callback(self._catalog.wake)
        return self._changes(entry, operator, first, last, limit, context)

    def _changes(
        self,
        entry: JobEntry,
        operator: tuple[int, str],
        first: int,
        last: int | None,
        limit: int,
        context: grpc.ServicerContext,
    ) -> Iterator[bytes]:
        """Epochs ``first..last`` (None: for ever) of one store, a group of epochs per walk
        over the store, waiting for each epoch to become queryable; the call ends with an
        error (never as if complete) when an epoch cannot be sent. Within a range (``last``
        set) each wait is a waiting read's: up to the deadline, or ``max_wait`` without one;
        a followed stream waits as long as its caller listens."""
        job_id, name, query_id = entry.descriptor.job_id, entry.descriptor.name, entry.descriptor.query_id
        following = first
        wait_ends: float | None = None  # while waiting for `following` within a range
        try:
            while context.is_active() and (last is None or following <= last):
                view = self._store.view()
                progress = view.progress(job_id)
                if progress.empty or progress.newest < following:
                    if view.dropped(job_id):
                        raise epochs.incarnation_changed(self._catalog, entry, "the change stream")
                    if last is not None and wait_ends is None:
                        budget = wait_budget(context, self._max_wait)
                        wait_ends = math.inf if budget is None else time.monotonic() + budget
                    left = 1.0 if wait_ends is None else min(1.0, wait_ends - time.monotonic())
                    if left <= 0:
                        raise self._changes_timed_out(name, following, progress.newest, context)
                    self._catalog.subscribe_wait(left)
                    continue
                wait_ends = None
                over_time.check_retained(name, following, progress, "the changes", changes=True)
                end = min(progress.newest, following + over_time.EPOCHS_PER_WALK - 1)
                if last is not None:
                    end = min(end, last)
                over_time.check_available(name, following, end, entry.unavailable)
                handle = entry.store(*operator)
                records = self._store.epochs(job_id, following, end - following + 1)
                committed = {r.epoch: r.committed_at_ms for r in records}
                # Each epoch is sent as soon as it is read: the caller works on it meanwhile.
                store_id = handle.descriptor.store_id
                for epoch, found in history.changes_by_epoch(view, store_id, following, end):
                    yield from over_time.epoch_messages(
                        epoch, found, handle.schema_at(epoch), limit, query_id, committed.get(epoch, 0)
                    )
                following = end + 1
        except EpochStateError as error:
            abort(context, error)  # never end as if the range were complete

    def _changes_timed_out(
        self, name: str, epoch: int, newest: int, context: grpc.ServicerContext
    ) -> epochs.EpochWaitTimedOut:
        without = (
            ""
            if has_deadline(context)
            else f" (the call had no deadline: the daemon waits at most {self._max_wait:g} s)"
        )
        return epochs.EpochWaitTimedOut(
            f"epoch {epoch} of job {name!r} did not become queryable before the deadline; the newest "
            f"is {newest}{without}",
            metadata={"job": name, "epoch": str(epoch)},
        )

    # -- discovery -------------------------------------------------------------

    def _summary(self, entry: JobEntry) -> pb.JobSummary:
        d = entry.descriptor
        p = entry.progress
        return pb.JobSummary(
            job=d.name,
            checkpoint=d.checkpoint,
            query_id=d.query_id,
            latest_epoch=p.newest,
            oldest_epoch=p.oldest,
            provider=d.provider,
            problems=[pb.EpochProblem(epoch=e, reason=r) for e, r in sorted(entry.problems.items())],
            committed_epoch=entry.committed,
            held_partitions=[]
            if d.partitions is None
            else [pb.PartitionRange(first=first, last=last) for first, last in d.partitions.ranges],
        )

    @domain_errors
    def ListJobs(self, request: pb.ListJobsRequest, context: grpc.ServicerContext) -> pb.ListJobsResponse:
        return pb.ListJobsResponse(jobs=[self._summary(e) for e in self._catalog.jobs()])

    @domain_errors
    def DescribeJob(
        self, request: pb.DescribeJobRequest, context: grpc.ServicerContext
    ) -> pb.DescribeJobResponse:
        named = self._named(request.job)
        if isinstance(named, AliasChain):
            return self._describe_alias(named)
        return self._describe(named)

    def _describe_alias(self, chain: AliasChain) -> pb.DescribeJobResponse:
        """The alias: which job answers which epochs, and the description of the job answering
        its newest ones (its summary's range and newest epochs in the alias's epochs)."""
        assert self._aliases is not None
        self._aliases.epochs.require_followed(chain, chain.current, None)
        response = self._describe(self._catalog.get(chain.current.job))
        summary = response.summary
        summary.job = chain.alias.name
        newest = self._aliases.epochs.newest(chain)
        summary.latest_epoch = -1 if newest is None else newest.epoch
        epochs = self._alias_epochs(chain, 0, 1)
        summary.oldest_epoch = epochs[0].epoch if epochs else -1
        summary.committed_epoch = summary.latest_epoch
        del summary.problems[:]  # they are the job's epochs: its own DescribeJob lists them
        response.alias.CopyFrom(self._aliases.info(chain))
        return response

    def _describe(self, entry: JobEntry) -> pb.DescribeJobResponse:
        operators: dict[int, pb.OperatorInfo] = {}
        for (op_id, _), handle in sorted(entry.stores.items()):
            info = operators.setdefault(
                op_id, pb.OperatorInfo(operator_id=op_id, name=handle.descriptor.operator_name)
            )
            info.stores.append(
                pb.StoreInfo(
                    name=handle.descriptor.store_name,
                    num_partitions=handle.latest.num_partitions,
                    key_schema=_schema(handle.key_schema),
                    value_schema=_schema(handle.value_schema),
                    kind=handle.descriptor.kind,
                    schema_first_epoch=handle.latest.first_epoch,
                    earlier_schemas=[
                        pb.SchemaVersion(
                            first_epoch=s.first_epoch,
                            key_schema=_schema(s.key),
                            value_schema=_schema(s.value),
                            num_partitions=s.num_partitions,
                        )
                        for s in handle.schemas[:-1]
                    ],
                )
            )
        return pb.DescribeJobResponse(summary=self._summary(entry), operators=list(operators.values()))

    @domain_errors
    def ListEpochs(
        self, request: pb.ListEpochsRequest, context: grpc.ServicerContext
    ) -> pb.ListEpochsResponse:
        if request.limit < 0:
            raise BadRequest(f"limit must be >= 0, got {request.limit}")
        named = self._named(request.job)
        if isinstance(named, AliasChain):
            return pb.ListEpochsResponse(epochs=self._alias_epochs(named, request.from_epoch, request.limit))
        entry = named
        records = self._store.epochs(entry.descriptor.job_id, request.from_epoch, request.limit)
        query_id = entry.descriptor.query_id
        return pb.ListEpochsResponse(epochs=[epoch_info(r, query_id) for r in records])

    def _alias_epochs(self, chain: AliasChain, first: int, limit: int) -> list[pb.EpochInfo]:
        """The retained epochs of an alias from ``first`` (alias epochs), at most ``limit``
        (0: all): each the epoch of the job answering it, with ``epoch`` the alias's."""
        assert self._aliases is not None
        found: list[pb.EpochInfo] = []
        for segment in self._aliases.epochs.followed(chain):
            entry = self._catalog.get(segment.job)
            query_id = entry.descriptor.query_id
            for record in self._store.epochs(entry.descriptor.job_id):
                epoch = self._aliases.epochs.alias_epoch(chain, segment, record.epoch)
                if epoch is None or epoch < first:
                    continue
                info = epoch_info(record, query_id)
                info.epoch, info.job, info.job_epoch = epoch, segment.job, record.epoch
                found.append(info)
        found.sort(key=lambda info: info.epoch)
        return found[:limit] if limit else found

    @domain_errors
    def WatchEpochs(
        self, request: pb.WatchEpochsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.EpochInfo]:
        entry = self._job(request.job, "WatchEpochs")  # fails the call before streaming starts
        after = request.after_epoch if request.HasField("after_epoch") else -1
        if after < 0:
            after = entry.progress.newest
        return self._watch(entry, after, context)

    def _watch(self, entry: JobEntry, after: int, context: grpc.ServicerContext) -> Iterator[pb.EpochInfo]:
        """The epochs of ``entry``'s query after ``after``, until the call ends, the daemon
        shuts down or the job's checkpoint is recreated (then INCARNATION_CHANGED: the new
        query's epochs restart at 0, so one stream never mixes two queries)."""
        job_id, query_id = entry.descriptor.job_id, entry.descriptor.query_id
        try:
            while context.is_active() and not self._catalog.closed:
                for record in self._store.epochs(job_id, after + 1):
                    yield epoch_info(record, query_id)
                    after = record.epoch
                if self._store.dropped(job_id) is not None:
                    raise epochs.incarnation_changed(self._catalog, entry, "the epoch stream")
                self._catalog.subscribe_wait(1.0)
        except (StoreDamaged, epochs.IncarnationChanged) as error:
            abort(context, error)  # the stream must not just end as if caught up
        except EpochStateError:
            return  # shutting down: end the stream cleanly

    # -- reports and administration ----------------------------------------------

    @domain_errors
    def ReportEpoch(
        self, request: pb.ReportEpochRequest, context: grpc.ServicerContext
    ) -> pb.ReportEpochResponse:
        if not request.job:
            raise BadRequest("job is required")
        if self._reported is not None and request.checkpoint:
            return self._report_to_group(request, context)
        try:
            entry = self._catalog.get(request.job)
        except EpochStateError:
            if not request.checkpoint:
                raise
            entry = self._ingest.follow(request.job, request.checkpoint)
        self._ingest.poke(request.job, request.epoch, request.run_id, request.query_id)
        return pb.ReportEpochResponse(ingested_epoch=entry.progress.newest)

    def _report_to_group(
        self, request: pb.ReportEpochRequest, context: grpc.ServicerContext
    ) -> pb.ReportEpochResponse:
        """A report naming a checkpoint, in a group: the group defines the job (the leader
        assigns its replicas, which follow it); this daemon looks for the epoch only if it
        follows the job already."""
        assert self._reported is not None
        try:
            entry: JobEntry | None = self._catalog.get(request.job)
        except JobNotFound:
            entry = None
        self._reported.ensure(request, followed=entry is not None, timeout=wait_budget(context))
        if entry is None:
            return pb.ReportEpochResponse(ingested_epoch=-1)
        self._ingest.poke(request.job, request.epoch, request.run_id, request.query_id)
        return pb.ReportEpochResponse(ingested_epoch=entry.progress.newest)

    @domain_errors
    def FollowJob(self, request: pb.FollowJobRequest, context: grpc.ServicerContext) -> pb.FollowJobResponse:
        if not request.job or not request.checkpoint:
            raise BadRequest("job and checkpoint are required")
        entry = self._ingest.follow(request.job, request.checkpoint)
        return pb.FollowJobResponse(summary=self._summary(entry))
