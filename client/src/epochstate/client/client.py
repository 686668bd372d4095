"""The Python client: epoch-pinned reads with typed results and typed errors.

Every read names the epoch it wants (an exact epoch, ``"latest"``, ``at_least=n``,
``covers=position`` or ``aligned_with=(job, epoch)``) and every result says which
epoch answered. UNAVAILABLE is
retried with exponential back-off until the call's deadline;
other errors raise the :mod:`epochstate.client.errors` exception the daemon's
stable reason (``error.reason``) names, or the one of its status code.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from epochstate.client import merged
from epochstate.client.alignment_admin import AlignmentAdmin
from epochstate.client.channels import connections_for
from epochstate.client.errors import DeadlineExceeded, IncarnationChanged, InvalidArgument, from_rpc_error
from epochstate.client.jobs_admin import JobsAdmin
from epochstate.client.local import is_local, open_local
from epochstate.client.over_time import (
    EpochChanges,
    KeyHistory,
    KeyVersion,
    Schemas,
    changes_request,
    history_request,
    next_history_page,
    versions_of,
    whole_epochs,
)
from epochstate.client.read_options import Aligned, AlignedWith, EpochArg, ReadKeywords, ReadOptions, selector
from epochstate.client.structs import Struct
from epochstate.client.tls import TlsOptions, open_channel
from epochstate.client.values import from_row, to_row, to_rows
from epochstate.core.sparktypes import StructType, parse_struct
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from typing import Unpack

# Defined with the read options; importable from here too.
__all__ = ["Aligned", "AlignedWith", "EpochArg", "EpochStateClient", "selector"]

# UNAVAILABLE (daemon restarting, not up yet) is retried with back-off until the
# call's deadline; reads are idempotent, so a retry can never change an answer.
_FIRST_BACKOFF = 0.05
_MAX_BACKOFF = 1.0

# gRPC's own retry layer is off: the client retries UNAVAILABLE itself (above), and
# the layer's per-call bookkeeping would cost client CPU on every call for retries it
# never makes.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.enable_retries", 0),
)


@dataclass(frozen=True)
class Lookup:
    """One key's state at ``epoch`` of query ``query_id``; ``value`` is None when ``found``
    is False.

    ``key`` and ``value`` are :class:`~epochstate.client.structs.Struct`: every field
    of the store's key and value schema, in schema order (``value["count"]`` by
    name, ``value[0]`` by position; see ``Struct`` for repeated names).
    ``query_id`` is the job's incarnation that answered (Spark's stable query id; a
    recreated checkpoint holds another, whose epochs restart at 0): pass it as
    ``query_id=`` to later reads to have them refused (:class:`IncarnationChanged`)
    rather than answered by another query. ``job`` is set for a read of an alias (a
    logical job name that follows hot-swaps): the job whose state answered; ``epoch`` is
    then the alias's epoch.
    """

    epoch: int
    key: Struct
    found: bool
    value: Struct | None
    partition: int | None
    query_id: str = ""
    job: str = ""


@dataclass(frozen=True)
class StoreSchema:
    """A store and its newest shape (in force from ``first_epoch``): schemas and number
    of Spark partitions; ``earlier`` holds the shapes of earlier epochs, oldest first."""

    operator_id: int
    operator_name: str
    store: str
    num_partitions: int
    key: StructType
    value: StructType
    # A transformWithState store's kind: "value", "list", "map" or "timers"; "" otherwise.
    kind: str = ""
    first_epoch: int = 0
    earlier: tuple[StoreSchema, ...] = ()

    def at(self, epoch: int | None) -> StoreSchema:
        """The shape in force at ``epoch`` (None: the newest)."""
        if epoch is None or epoch >= self.first_epoch or not self.earlier:
            return self
        return next((s for s in reversed(self.earlier) if s.first_epoch <= epoch), self.earlier[0])


Answer = pb.GetResponse | pb.MultiGetResponse | pb.ScanResponse | pb.ChangesResponse
_READS = (pb.GetResponse, pb.MultiGetResponse, pb.ScanResponse)


def shape_of(answer: Answer | None) -> tuple[int, int] | None:
    """(epoch, first epoch of the shape its records are in) of a read response; None
    from a daemon that does not say."""
    if answer is None or not answer.HasField("shape_first_epoch"):
        return None
    return own_epoch(answer), answer.shape_first_epoch


def own_epoch(answer: Answer) -> int:
    """The answering job's own epoch: ``job_epoch`` for an answer of an alias (whose
    ``epoch`` is the alias's), else ``epoch``; the shapes of a store are in its job's epochs."""
    if isinstance(answer, _READS) and answer.HasField("job_epoch"):
        return answer.job_epoch
    return answer.epoch


@dataclass(frozen=True)
class JobDescription:
    job: str
    checkpoint: str
    query_id: str
    latest_epoch: int
    oldest_epoch: int
    stores: tuple[StoreSchema, ...]
    committed_epoch: int = -1
    problems: tuple[pb.EpochProblem, ...] = ()
    # The Spark partitions the daemon holds, as (first, last) ranges; empty: every one
    # (a group replica of some shards: its Scan lists their keys only).
    held_partitions: tuple[tuple[int, int], ...] = ()

    def store(self, operator_id: int = 0, name: str = "default") -> StoreSchema:
        for s in self.stores:
            if s.operator_id == operator_id and s.store == (name or "default"):
                return s
        known = ", ".join(f"{s.operator_id}/{s.store}" for s in self.stores) or "none"
        raise InvalidArgument(f"job {self.job!r} has no store {operator_id}/{name} (known: {known})")


T = TypeVar("T")


class EpochStateClient:
    """A connection to one daemon. Thread-safe; close it (or use ``with``).

    ``target`` is ``host:port`` or, for a daemon on the same node, its Unix socket
    ``unix:///path/to/epochstate.sock`` (by default in the daemon's data directory), or
    ``local:///path/to/data_dir`` to read that daemon's store in this process (same
    answers, errors and guarantees; see :mod:`epochstate.client.local`).
    ``tls`` says how to secure the connection and which credentials to present
    (None: the ``EPOCHSTATE_TLS_*`` environment variables, see
    :class:`~epochstate.client.tls.TlsOptions`). A daemon that refuses the caller
    raises ``Unauthenticated`` or ``PermissionDenied``; a failed TLS handshake (a
    certificate the daemon does not trust) is ``Unavailable``.
    ``connections``: how many connections to a TCP target the calls take turns on, so
    that they spread over a daemon's serving processes (the kernel gives each
    connection to one of them; see :mod:`epochstate.client.channels`); None:
    :data:`~epochstate.client.channels.DEFAULT_CONNECTIONS`, and one to a Unix socket.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 10.0,
        tls: TlsOptions | None = None,
        connections: int | None = None,
    ) -> None:
        self.target = target
        self.timeout = timeout
        self._channel = (
            open_local(target)
            if is_local(target)
            else open_channel(target, tls, CHANNEL_OPTIONS, connections_for(target, connections))
        )
        self._stub = pb_grpc.EpochStateStub(self._channel)
        self._schemas: dict[str, JobDescription] = {}

    def __enter__(self) -> EpochStateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    @property
    def alignment(self) -> AlignmentAdmin:
        """The daemon's alignment control (``AlignmentAdmin``): status, catch-up, align, abort, prune."""
        return AlignmentAdmin(self._channel, self._call)

    @property
    def group_jobs(self) -> JobsAdmin:
        """The jobs of the daemon's group (``JobsAdmin``): add, remove, pause, resume, restart, status."""
        return JobsAdmin(self._channel, self._call)

    @property
    def stub(self) -> pb_grpc.EpochStateStub:
        """The raw gRPC stub, for callers that build messages themselves."""
        return self._stub

    def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        backoff = _FIRST_BACKOFF
        while True:
            remaining = deadline - time.monotonic()
            try:
                return method(request, timeout=max(remaining, 0.001))
            except grpc.RpcError as error:
                retry = error.code() == grpc.StatusCode.UNAVAILABLE and remaining > backoff
                if not retry:
                    raise from_rpc_error(error) from None
            time.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF)

    # -- discovery ------------------------------------------------------------

    def jobs(self, *, timeout: float | None = None) -> list[pb.JobSummary]:
        return list(self._call(self._stub.ListJobs, pb.ListJobsRequest(), timeout).jobs)

    def describe(self, job: str, *, refresh: bool = False, timeout: float | None = None) -> JobDescription:
        if not refresh and job in self._schemas:
            return self._schemas[job]
        response = self._call(self._stub.DescribeJob, pb.DescribeJobRequest(job=job), timeout)
        stores = tuple(
            StoreSchema(
                op.operator_id,
                op.name,
                st.name,
                st.num_partitions,
                _struct_of(st.key_schema),
                _struct_of(st.value_schema),
                st.kind,
                first_epoch=st.schema_first_epoch,
                earlier=tuple(
                    StoreSchema(
                        op.operator_id,
                        op.name,
                        st.name,
                        v.num_partitions or st.num_partitions,
                        _struct_of(v.key_schema),
                        _struct_of(v.value_schema),
                        st.kind,
                        first_epoch=v.first_epoch,
                    )
                    for v in st.earlier_schemas
                ),
            )
            for op in response.operators
            for st in op.stores
        )
        s = response.summary
        description = JobDescription(
            s.job,
            s.checkpoint,
            s.query_id,
            s.latest_epoch,
            s.oldest_epoch,
            stores,
            s.committed_epoch,
            tuple(s.problems),
            tuple((r.first, r.last) for r in s.held_partitions),
        )
        self._schemas[job] = description
        return description

    def _store(self, job: str, operator_id: int, store: str, query_id: str | None = None) -> StoreSchema:
        """The store's schemas, described again when the cached description is of another
        query than ``query_id`` (a recreated checkpoint's query may have other stores)."""
        try:
            description = self.describe(job)
            if query_id and description.query_id != query_id:
                description = self.describe(job, refresh=True)
            return description.store(operator_id, store)
        except InvalidArgument:
            return self.describe(job, refresh=True).store(operator_id, store)

    def _answered(
        self,
        job: str,
        operator_id: int,
        store: str,
        schema: StoreSchema,
        query_id: str,
        answer: Answer | None = None,
    ) -> StoreSchema:
        """The schemas to decode an answer of query ``query_id`` with: ``schema`` if it is
        that query's and knows the shape the ``answer`` says its records are in, else the
        store's as the job describes it now (its checkpoint was recreated since the
        description was cached, or the store took a new shape since: the new query or
        shape may have other schemas).

        An answer of an alias (a logical job name that follows hot-swaps) names the job
        whose state answered: its records are decoded with that job's schemas.

        Raises:
            IncarnationChanged: the job has moved on to yet another query meanwhile.
        """
        if isinstance(answer, _READS) and answer.job and answer.job != job:
            job = answer.job
            schema = self._store(job, operator_id, store, query_id)
        described = self._schemas.get(job)
        if not query_id or described is None or described.query_id == query_id:
            shape = shape_of(answer)
            if shape is None or schema.at(shape[0]).first_epoch == shape[1]:
                return schema
        described = self.describe(job, refresh=True)
        if described.query_id != query_id:
            raise IncarnationChanged(
                f"the answer is of query {query_id} of job {job!r}, which now holds query "
                f"{described.query_id}",
                metadata={"job": job, "requestedQueryId": query_id, "currentQueryId": described.query_id},
            )
        return described.store(operator_id, store)

    def epochs(
        self, job: str, *, from_epoch: int = 0, limit: int = 0, timeout: float | None = None
    ) -> list[pb.EpochInfo]:
        request = pb.ListEpochsRequest(job=job, from_epoch=from_epoch, limit=limit)
        return list(self._call(self._stub.ListEpochs, request, timeout).epochs)

    def wait_for(self, job: str, epoch: int, *, timeout: float = 60.0, poll: float = 0.1) -> int:
        """Wait until ``job`` is followed and its newest queryable epoch is >= ``epoch``.

        Returns that newest epoch; raises DeadlineExceeded after ``timeout`` seconds.
        Unlike ``get(..., at_least=n)`` it needs no key schema, so it also works
        before the job's first epoch is known.
        """
        deadline = time.monotonic() + timeout
        while True:
            newest = {j.job: j.latest_epoch for j in self.jobs()}.get(job, -1)
            if newest >= epoch:
                return newest
            if time.monotonic() >= deadline:
                raise DeadlineExceeded(f"job {job!r} did not reach epoch {epoch} within {timeout:g} s")
            time.sleep(poll)

    def watch(self, job: str, *, after_epoch: int | None = None) -> Iterator[pb.EpochInfo]:
        """Yield each epoch as it becomes queryable (blocks; cancel by closing)."""
        request = pb.WatchEpochsRequest(job=job)
        if after_epoch is not None:
            request.after_epoch = after_epoch
        try:
            yield from self._stub.WatchEpochs(request)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    # -- reads -------------------------------------------------------------------

    def get(
        self, job: str, key: Any, *, options: ReadOptions | None = None, **read: Unpack[ReadKeywords]
    ) -> Lookup:
        """One key pinned to one epoch (:class:`ReadOptions` says which, and which store).
        ``query_id`` (from an earlier result's ``query_id``) pins the job's incarnation
        too: if the checkpoint holds another query now, the read raises
        :class:`IncarnationChanged` instead of being answered by it."""
        o = ReadOptions.of(options, read)
        schema = self._store(job, o.operator_id, o.store, o.query_id)
        request = o.get_request(job)
        to_row(key, (schema.at(o.exact) if schema.earlier else schema).key, into=request.key)
        response = self._call(self._stub.Get, request, o.timeout)
        schema = self._answered(job, o.operator_id, o.store, schema, response.query_id, response)
        at = schema.at(own_epoch(response)) if schema.earlier else schema
        return _lookup(response.epoch, response.record, at, response.query_id, response.job)

    def multi_get(
        self,
        job: str,
        keys: Sequence[Any],
        *,
        options: ReadOptions | None = None,
        **read: Unpack[ReadKeywords],
    ) -> list[Lookup]:
        """Look up many keys pinned to one epoch; results in request order. ``query_id``
        pins the job's incarnation as for :meth:`get`."""
        o = ReadOptions.of(options, read)
        schema = self._store(job, o.operator_id, o.store, o.query_id)
        key_schema = schema.at(o.exact).key
        request = pb.MultiGetRequest(store=o.store_ref(job), epoch=o.selector())
        to_rows(keys, key_schema, request.keys)
        response = self._call(self._stub.MultiGet, request, o.timeout)
        answered = self._answered(job, o.operator_id, o.store, schema, response.query_id, response)
        at = answered.at(own_epoch(response))
        return _lookups(response, at)

    def pinned_epoch(
        self, job: str, *, options: ReadOptions | None = None, **read: Unpack[ReadKeywords]
    ) -> int:
        """The queryable epoch of ``job`` a read with these options would be pinned to.

        Waits like the read would; raises what it would raise. Reads with
        ``epoch=`` the returned epoch then give the same answers as reads with
        the selector itself, and need no second resolution.
        """
        o = ReadOptions.of(options, read)
        request = pb.MultiGetRequest(store=o.store_ref(job, ""), epoch=o.selector())
        return int(self._call(self._stub.MultiGet, request, o.timeout).epoch)

    def scan(
        self,
        job: str,
        *,
        prefix: Any = (),
        page_size: int = 1000,
        limit: int | None = None,
        options: ReadOptions | None = None,
        **read: Unpack[ReadKeywords],
    ) -> Iterator[Lookup]:
        """Every live key (starting with ``prefix``) at one epoch, in key order.

        The epoch is chosen as for :meth:`get`; all pages are pinned to the epoch
        and the query the first page resolved to (the page token carries both),
        however far the job has moved on since: a page after the checkpoint was
        recreated raises :class:`IncarnationChanged`. ``query_id`` pins the first
        page's query too.
        """
        o = ReadOptions.of(options, read)
        schema = self._store(job, o.operator_id, o.store, o.query_id)
        request = pb.ScanRequest(
            store=o.store_ref(job),
            epoch=o.selector(),
            prefix=to_row(prefix, schema.at(o.exact).key, partial=True),
            limit=page_size,
        )
        returned = 0
        while True:
            response = self._call(self._stub.Scan, request, o.timeout)
            schema = self._answered(job, o.operator_id, o.store, schema, response.query_id, response)
            left = None if limit is None else limit - returned
            for found in _lookups(response, schema.at(own_epoch(response)), first=left):
                yield found
                returned += 1
                if limit is not None and returned >= limit:
                    return
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    # -- over time ---------------------------------------------------------------

    def history(
        self,
        job: str,
        key: Any,
        *,
        from_epoch: int = 0,
        to_epoch: int | None = None,
        wait: bool = False,
        operator_id: int = 0,
        store: str = "default",
        query_id: str | None = None,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> KeyHistory:
        """Every version of one key valid at some epoch of ``[from_epoch, to_epoch]``
        (``to_epoch`` None: the newest queryable), oldest first, deletions included; every
        page is pinned to the ``to_epoch`` the first resolved. ``wait``: wait (up to the
        deadline) for a ``to_epoch`` not queryable yet. Raises :class:`EpochRetired` for a
        ``from_epoch`` older than retention, ``InvalidArgument`` for a bad range."""
        schema = self._store(job, operator_id, store, query_id)
        request = history_request(
            job,
            to_row(key, schema.at(to_epoch).key),
            from_epoch=from_epoch,
            to_epoch=to_epoch,
            wait=wait,
            operator_id=operator_id,
            store=store,
            query_id=query_id,
            page_size=page_size,
        )
        versions: list[KeyVersion] = []
        more = True
        while more:
            response = self._call(self._stub.History, request, timeout)
            schema = self._answered(job, operator_id, store, schema, response.query_id)
            versions += versions_of(response, _schemas_of(schema))
            more = next_history_page(request, response)
        return KeyHistory(job, from_epoch, response.to_epoch, response.query_id, tuple(versions))

    def changes(
        self,
        job: str,
        *,
        from_epoch: int,
        to_epoch: int | None = None,
        follow: bool = False,
        operator_id: int = 0,
        store: str = "default",
        query_id: str | None = None,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> Generator[EpochChanges, None, None]:
        """The changes of each epoch from ``from_epoch`` to ``to_epoch`` (None: the newest
        queryable when the call starts), one :class:`EpochChanges` per whole epoch, in
        epoch order, each epoch's changes in key order. With ``follow`` the iterator never
        ends: it yields each new epoch as it becomes queryable (close it to stop). A
        consumer that stopped after epoch ``e`` resumes with ``from_epoch=e + 1``.
        ``timeout``: the whole stream's deadline (None: none). Raises
        :class:`EpochRetired` when ``from_epoch``'s changes are no longer known."""
        schema = self._store(job, operator_id, store, query_id)
        request = changes_request(
            job,
            from_epoch=from_epoch,
            to_epoch=to_epoch,
            follow=follow,
            operator_id=operator_id,
            store=store,
            query_id=query_id,
            page_size=page_size,
        )

        def schemas(message: pb.ChangesResponse) -> Schemas:
            nonlocal schema
            schema = self._answered(job, operator_id, store, schema, message.query_id, message)
            return _schemas_of(schema)

        stream = self._stub.Changes(request, timeout=timeout)
        try:
            yield from whole_epochs(stream, schemas)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        finally:
            stream.cancel()  # type: ignore[no-untyped-call]

    # -- reports -----------------------------------------------------------------

    def follow(self, job: str, checkpoint: str, *, timeout: float | None = None) -> pb.JobSummary:
        request = pb.FollowJobRequest(job=job, checkpoint=checkpoint)
        return self._call(self._stub.FollowJob, request, timeout).summary  # type: ignore[no-any-return]


def _schemas_of(schema: StoreSchema) -> Schemas:
    def at(epoch: int) -> tuple[StructType, StructType]:
        shape = schema.at(epoch)
        return shape.key, shape.value

    return at


def _struct_of(schema: pb.Schema) -> StructType:
    return parse_struct(
        {
            "type": "struct",
            "fields": [
                {"name": f.name, "type": json.loads(f.type_json), "nullable": f.nullable}
                for f in schema.fields
            ],
        }
    )


# From how many records a response's are decoded merged (one parse of them all, see
# epochstate.client.merged): below, its fixed cost exceeds what it saves. Only a response
# that names the shape its records are in is: the schema it is decoded with is then the
# one its rows were written in (merged columns are placed by the schema's order).
_MERGED_FROM = 4


def _lookups(
    response: pb.MultiGetResponse | pb.ScanResponse,
    schema: StoreSchema,
    pin: tuple[int, str, str] | None = None,
    first: int | None = None,
) -> list[Lookup]:
    """The records of a MultiGet or Scan response, decoded with ``schema``, each of the
    response's epoch, query and job, or of ``pin``'s (epoch, query id, job); ``first``:
    only so many of them."""
    records = response.records
    count = len(records)
    epoch, query_id, job = (response.epoch, response.query_id, response.job) if pin is None else pin
    if first is not None and first < count:
        return [_lookup(epoch, r, schema, query_id, job) for r in records[: max(first, 0)]]
    if count >= _MERGED_FROM and response.HasField("shape_first_epoch"):
        read = merged.records(response.SerializeToString(), count, schema.key, schema.value)
        if read is not None:
            return merged.instances(
                Lookup,
                (
                    {
                        "epoch": epoch,
                        "key": key,
                        "found": found,
                        "value": value,
                        "partition": partition if found else None,
                        "query_id": query_id,
                        "job": job,
                    }
                    for key, value, found, partition in zip(*read, strict=True)
                ),
            )
    return [_lookup(epoch, r, schema, query_id, job) for r in records]


def _lookup(epoch: int, record: pb.Record, schema: StoreSchema, query_id: str, job: str = "") -> Lookup:
    found = record.found
    # Every field set at once, as __init__ would (every field is given here, and Lookup
    # checks nothing): a frozen dataclass's __init__ sets each through object.__setattr__,
    # which costs as much as decoding the key and the value of a local read.
    made = object.__new__(Lookup)
    made.__dict__.update(
        {
            "epoch": epoch,
            "key": from_row(record.key, schema.key),
            "found": found,
            "value": from_row(record.value, schema.value) if found else None,
            "partition": record.partition if found else None,
            "query_id": query_id,
            "job": job,
        }
    )
    return made
