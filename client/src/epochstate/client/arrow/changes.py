"""A store's changes as Arrow: the Changes stream, one record batch per whole epoch.

The columns are :func:`~epochstate.client.arrow.types.changes_schema`'s: ``epoch``,
``change_type`` (``upsert`` or ``delete``), then ``key``, ``value`` (null for a
delete) and ``partition_id``, as Spark's ``readChangeFeed`` has them. The records
are turned into columns straight from the wire messages, as a Scan's are.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator

import grpc
import pyarrow as pa  # type: ignore[import-untyped]

from epochstate.client.arrow.batches import wire_changes_batch, with_epoch
from epochstate.client.arrow.types import changes_schema
from epochstate.client.client import EpochStateClient, StoreSchema
from epochstate.client.errors import from_rpc_error
from epochstate.client.over_time import changes_request
from epochstate.client.read_ahead import ReadAhead
from epochstate.v1 import epochstate_pb2 as pb


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

    stream = client.stub.Changes(request, timeout=timeout)
    # Over the network the stream is read ahead: the daemon makes the next messages while
    # this thread builds batches (in process, the daemon's work is this thread's anyway).
    messages: Iterable[pb.ChangesResponse] = (
        ReadAhead[pb.ChangesResponse](stream) if isinstance(stream, grpc.Call) else stream
    )
    try:
        yield from epoch_batches(messages, shape)
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None
    finally:
        if isinstance(messages, ReadAhead):
            messages.close()
        stream.cancel()  # type: ignore[no-untyped-call]


def epoch_batches(
    messages: Iterable[pb.ChangesResponse], shape: Callable[[pb.ChangesResponse], StoreSchema]
) -> Iterator[pa.RecordBatch]:
    """The messages of a Changes stream as one record batch per epoch that changed
    something, each yielded once its end-of-epoch marker came. ``shape(message)``: the
    store's shape a message's records are in."""
    pending: list[pb.Change] = []
    store: StoreSchema | None = None
    for message in messages:
        if not message.epoch_complete:
            store = shape(message)
            pending.extend(message.changes)
            continue
        if pending:
            assert store is not None
            columns = with_epoch(changes_schema(store), message.epoch, message.query_id)
            yield wire_changes_batch(message.epoch, pending, store, columns)
        pending, store = [], None
