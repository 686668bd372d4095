"""The changes of a job served by several shards: one feed per shard, or merged per epoch.

Every replica of a shard answers the changes of an epoch with the same bytes, and a
feed is resumable at any epoch boundary, so a shard's feed fails over by opening
another replica's feed at the first epoch it has not yet yielded: nothing is lost
or repeated. The merged feed takes each epoch from every shard's feed, in shard
order, and yields it once all shards have completed it: one epoch of the whole
job, its keys in key order within each shard, shard by shard (as a routed scan
lists them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterator, Sequence

import grpc

from epochstate.client.errors import Unavailable, from_rpc_error
from epochstate.client.over_time import EpochChanges, Schemas, whole_epochs
from epochstate.client.routing import Location, Replicas, Shard
from epochstate.v1 import epochstate_pb2 as pb

# How often one shard's feed may move to another replica before it gives up.
MAX_FAILOVERS = 8


def shard_feed(
    location: Callable[[], Location],
    index: int,
    request: pb.ChangesRequest,
    replicas: Replicas,
    schemas: Callable[[pb.ChangesResponse], Schemas],
    timeout: float | None,
) -> Generator[EpochChanges, None, None]:
    """The changes of shard ``index``'s partitions, epoch by epoch, from any of its
    serving replicas; on an unreachable replica, resumed on another from the next
    whole epoch. Changes of partitions outside the shard (a replica that holds more
    than it) are left out."""
    request = _copy(request)  # its from_epoch moves on with the feed
    failovers = 0
    while True:
        found = location()
        shard = found.shards[index]
        tried = [r.address for r in replicas.order(shard.replicas, lambda r: True)]
        if not tried:
            raise Unavailable(f"no serving replica of shard {index} of job {found.job!r}")
        for address in tried:
            stream = replicas.stub(address).Changes(request, timeout=timeout)
            try:
                for epoch in whole_epochs(stream, schemas):
                    replicas.answered(address)
                    yield _within(epoch, shard, found.single)
                    request.from_epoch = epoch.epoch + 1
                return
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE:
                    raise from_rpc_error(error) from None
                replicas.failed(address)
                failovers += 1
                if failovers > MAX_FAILOVERS:
                    raise from_rpc_error(error) from None
            finally:
                stream.cancel()  # type: ignore[no-untyped-call]


def _copy(given: pb.ChangesRequest) -> pb.ChangesRequest:
    copy = pb.ChangesRequest()
    copy.CopyFrom(given)
    return copy


def _within(epoch: EpochChanges, shard: Shard, single: bool) -> EpochChanges:
    if single:
        return epoch
    kept = tuple(c for c in epoch.changes if c.partition is None or shard.covers(c.partition))
    return dataclasses.replace(epoch, changes=kept)


def merged(feeds: Sequence[Iterator[EpochChanges]], job: str) -> Generator[EpochChanges, None, None]:
    """One feed of whole epochs of the job from the feeds of its shards (in shard order).

    Raises:
        Unavailable: the shards answered different epochs or queries (a shard's
            replicas follow another incarnation of the job).
    """
    try:
        while True:
            parts = [next(feed, None) for feed in feeds]
            if all(p is None for p in parts):
                return
            if any(p is None for p in parts):
                raise Unavailable(f"the shards of job {job!r} ended their feeds at different epochs")
            first = parts[0]
            assert first is not None
            for part in parts:
                assert part is not None
                if (part.epoch, part.query_id) != (first.epoch, first.query_id):
                    raise Unavailable(
                        f"the shards of job {job!r} answered epoch {part.epoch} of query {part.query_id} "
                        f"and epoch {first.epoch} of query {first.query_id}"
                    )
            changes = tuple(c for part in parts if part is not None for c in part.changes)
            yield dataclasses.replace(first, changes=changes)
    finally:
        for feed in feeds:
            close = getattr(feed, "close", None)
            if close is not None:
                close()
