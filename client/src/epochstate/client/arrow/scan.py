"""Whole epochs of a store as Arrow: the Scan pages of one epoch, each a record batch.

From one daemon (:class:`~epochstate.client.EpochStateClient`) the pages are asked
for ahead: page ``n + 1`` is on its way (its token is in page ``n``) while page
``n`` is decoded, so the daemon's work and the client's overlap. Through a group
(:class:`~epochstate.client.RoutedClient`) the routed scan's records are converted
as they come.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any

import grpc
import pyarrow as pa  # type: ignore[import-untyped]

from epochstate.client.arrow.batches import state_batch, with_epoch
from epochstate.client.arrow.types import state_schema
from epochstate.client.client import EpochStateClient, Lookup, StoreSchema
from epochstate.client.errors import ResponseTooLarge, from_rpc_error
from epochstate.client.read_options import ReadKeywords, ReadOptions
from epochstate.client.routed import RoutedClient
from epochstate.client.values import to_row
from epochstate.v1 import epochstate_pb2 as pb

if TYPE_CHECKING:
    from typing import Unpack

# The daemon's largest page: fewer round trips for a whole epoch.
MAX_PAGE = 10_000
# What the daemon takes a page size of 0 for.
DEFAULT_PAGE = 1000
# A routed scan's records per batch.
ROUTED_BATCH = 10_000


def scan_batches(
    client: EpochStateClient,
    job: str,
    *,
    prefix: Any = (),
    limit: int | None = None,
    page_size: int = MAX_PAGE,
    options: ReadOptions | None = None,
    **read: Unpack[ReadKeywords],
) -> Generator[pa.RecordBatch, None, None]:
    """Every live key of one store at one epoch (as :meth:`EpochStateClient.scan` chooses
    and pins it, from the same :class:`ReadOptions`), as record batches in key order; at
    least one batch, all with the same schema, whose metadata names the epoch and query
    that answered.

    Raises what :meth:`EpochStateClient.scan` raises.
    """
    o = ReadOptions.of(options, read)
    operator_id, store, timeout = o.operator_id, o.store, o.timeout
    if isinstance(client, RoutedClient):
        lookups = client.scan(job, prefix=prefix, page_size=page_size, limit=limit, options=o)
        yield from _routed_batches(client, job, operator_id, store, lookups)
        return
    schema = client._store(job, operator_id, store, o.query_id)
    request = pb.ScanRequest(
        store=o.store_ref(job),
        epoch=o.selector(),
        prefix=to_row(prefix, schema.at(o.exact).key, partial=True),
        limit=page_size,
    )
    seconds = client.timeout if timeout is None else timeout
    pending: grpc.Future[pb.ScanResponse] | None = client.stub.Scan.future(request, timeout=seconds)
    returned = 0
    first = True
    try:
        while pending is not None:
            response, request = _page(client, pending, request, timeout)
            if response.next_page_token and (limit is None or returned + len(response.records) < limit):
                following = pb.ScanRequest()
                following.CopyFrom(request)
                # The token pins the first page's epoch and query.
                following.page_token = response.next_page_token
                request = following
                pending = client.stub.Scan.future(request, timeout=seconds)
            else:
                pending = None
            answered = client._answered(job, operator_id, store, schema, response.query_id, response)
            shape = answered.at(response.epoch)
            records = response.records
            if limit is not None and returned + len(records) > limit:
                records = records[: limit - returned]
            if records or first:
                columns = with_epoch(state_schema(shape), response.epoch, response.query_id)
                yield state_batch(records, shape, columns)
            returned += len(records)
            first = False
    finally:
        if pending is not None:  # the caller stopped early: the page asked for ahead is not needed
            pending.cancel()


def _page(
    client: EpochStateClient,
    pending: grpc.Future[pb.ScanResponse],
    request: pb.ScanRequest,
    timeout: float | None,
) -> tuple[Any, pb.ScanRequest]:
    """A page's response and the request that got it: an UNAVAILABLE daemon is asked again
    as every read does; a page over the daemon's response limit is asked for again in
    halves (and the pages after it are as small)."""
    try:
        return pending.result(), request
    except grpc.RpcError as error:
        failure = from_rpc_error(error)
    if failure.code == grpc.StatusCode.UNAVAILABLE:
        return client._call(client.stub.Scan, request, timeout), request
    if not isinstance(failure, ResponseTooLarge) or request.limit == 1:
        raise failure
    smaller = pb.ScanRequest()
    smaller.CopyFrom(request)
    smaller.limit = max(1, (request.limit or DEFAULT_PAGE) // 2)
    seconds = client.timeout if timeout is None else timeout
    return _page(client, client.stub.Scan.future(smaller, timeout=seconds), smaller, timeout)


def _routed_batches(
    client: EpochStateClient, job: str, operator_id: int, store: str, lookups: Iterable[Lookup]
) -> Generator[pa.RecordBatch, None, None]:
    chunk: list[Lookup] = []
    first = True
    for lookup in lookups:
        chunk.append(lookup)
        if len(chunk) == ROUTED_BATCH:
            yield lookups_batch(
                chunk, client._store(job, operator_id, store, lookup.query_id).at(lookup.epoch)
            )
            chunk, first = [], False
    if chunk or first:
        described = client._store(job, operator_id, store, chunk[0].query_id if chunk else None)
        yield lookups_batch(chunk, described.at(chunk[0].epoch if chunk else None))


def lookups_batch(lookups: list[Lookup], store: StoreSchema) -> pa.RecordBatch:
    """The batch of decoded lookups (found or not) of ``store``, from their Python values."""
    schema = state_schema(store)
    if lookups:
        schema = with_epoch(schema, lookups[0].epoch, lookups[0].query_id)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([lk.key for lk in lookups], type=schema.field("key").type),
            pa.array([lk.value for lk in lookups], type=schema.field("value").type),
            pa.array([lk.partition or 0 for lk in lookups], type=pa.int32()),
        ],
        schema=schema,
    )
