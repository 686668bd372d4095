"""A store's changes as Arrow: the Changes stream, one record batch per whole epoch.

The columns are :func:`~epochstate.client.arrow.types.changes_schema`'s: ``epoch``,
``change_type`` (``upsert`` or ``delete``), then ``key``, ``value`` (null for a
delete) and ``partition_id``, as Spark's ``readChangeFeed`` has them. The columns
of a message are read from its bytes in one parse where its counts prove them
(:mod:`.change_columns`), else from its records as a Scan's are.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator

import grpc
import pyarrow as pa  # type: ignore[import-untyped]

from epochstate.client.arrow.batches import (
    ChangeArrays,
    epoch_changes_batch,
    wire_change_arrays,
    with_epoch,
)
from epochstate.client.arrow.change_columns import MergedChanges
from epochstate.client.arrow.types import changes_schema
from epochstate.client.client import EpochStateClient, StoreSchema
from epochstate.client.errors import from_rpc_error
from epochstate.client.over_time import changes_request
from epochstate.client.read_ahead import ReadAhead
from epochstate.v1 import epochstate_pb2 as pb

_CHANGES = f"/{pb.DESCRIPTOR.services_by_name['EpochState'].full_name}/Changes"


def changes_batches_of(
    client: EpochStateClient,
    job: str,
    *,
    from_epoch: int,
    to_epoch: int | None = None,
    follow: bool = False,
    operator_id: int = 0,
    store: str = "default",
    query_id: str | None = None,
    page_size: int = 10_000,
    timeout: float | None = None,
) -> Generator[pa.RecordBatch, None, None]:
    """The changes of each epoch from ``from_epoch`` to ``to_epoch`` (as
    :meth:`EpochStateClient.changes` chooses them), one record batch per epoch that
    changed something, yielded once the epoch is complete, in epoch order, each in key
    order. The batch's metadata names its epoch and query; an epoch with no change
    yields no batch. A consumer that stopped after the batch of epoch ``e`` resumes
    with ``from_epoch=e + 1``, losing and repeating nothing. With ``follow`` the
    generator never ends (close it to stop).

    Raises what :meth:`EpochStateClient.changes` raises.
    """
    schema: StoreSchema = client._store(job, operator_id, store, query_id)
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

    def shape(message: pb.ChangesResponse) -> StoreSchema:
        nonlocal schema
        schema = client._answered(job, operator_id, store, schema, message.query_id, message)
        return schema.at(message.epoch)

    # The messages as bytes: epoch_batches reads their columns without the declared parse.
    call = client._channel.unary_stream(
        _CHANGES, request_serializer=pb.ChangesRequest.SerializeToString, response_deserializer=None
    )
    stream = call(request, timeout=timeout)
    # Over the network the stream is read ahead: the daemon makes the next messages while
    # this thread builds batches (in process, the daemon's work is this thread's anyway).
    messages: Iterable[bytes] = ReadAhead[bytes](stream) if isinstance(stream, grpc.Call) else stream
    try:
        yield from epoch_batches(messages, shape)
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None
    finally:
        if isinstance(messages, ReadAhead):
            messages.close()
        stream.cancel()  # type: ignore[no-untyped-call]


def epoch_batches(
    messages: Iterable[bytes | pb.ChangesResponse], shape: Callable[[pb.ChangesResponse], StoreSchema]
) -> Iterator[pa.RecordBatch]:
    """The messages of a Changes stream (serialized, or parsed) as one record batch per
    epoch that changed something, each yielded once its end-of-epoch marker came.
    ``shape(message)``: the store's shape a message's records are in (given the message
    without its changes, for a serialized one)."""
    parts: list[ChangeArrays] = []
    schema: pa.Schema | None = None
    for item in messages:
        merged: MergedChanges | None = None
        if isinstance(item, bytes):
            merged = MergedChanges(item)
            message = merged.header
        else:
            message = item
        if not message.epoch_complete:
            store = shape(message)
            schema = changes_schema(store)
            read = None if merged is None else merged.columns(store, schema)
            if read is None:
                parsed = message if merged is None else pb.ChangesResponse.FromString(merged.data)
                read = wire_change_arrays(parsed.changes, store, schema)
            parts.append(read)
            continue
        if parts:
            assert schema is not None
            columns_of = with_epoch(schema, message.epoch, message.query_id)
            yield epoch_changes_batch(message.epoch, parts, columns_of)
        parts = []
