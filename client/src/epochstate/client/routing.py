"""Where a routed client sends a read: the located replicas of a job, and one channel per daemon.

A :class:`Location` is a ``Locate`` answer: each shard's Spark partitions and its
replicas. :class:`Replicas` keeps one channel per daemon address (with the
client's TLS options) and remembers which addresses failed lately, so that a
dead daemon still listed in ZooKeeper (until its session expires) is tried last.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from epochstate.client.channels import connections_for
from epochstate.client.tls import TlsOptions, open_channel
from epochstate.core.partition_ranges import LAST_PARTITION
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc

# How long an address that failed a call is tried only after every other one.
SUSPECT_SECONDS = 5.0


@dataclass(frozen=True)
class Replica:
    node: str
    address: str
    serving: bool
    newest_epoch: int
    oldest_epoch: int
    query_id: str

    def holds(self, epoch: int) -> bool:
        """Its replica znode says it holds ``epoch`` (as of the location's time)."""
        return self.oldest_epoch <= epoch <= self.newest_epoch


@dataclass(frozen=True)
class Shard:
    first: int
    last: int
    replicas: tuple[Replica, ...]

    def covers(self, partition: int) -> bool:
        return self.first <= partition <= self.last


# (first epoch, number of partitions) of each partition count a store had, oldest first.
Layouts = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Location:
    """Where ``job`` is served, as ``Locate`` answered at ``fetched_at`` (monotonic
    seconds): its shards, and each store's partition counts by epoch."""

    job: str
    query_id: str
    layouts: dict[tuple[int, str], Layouts]
    shards: tuple[Shard, ...]
    fetched_at: float

    def partitions_at(self, operator_id: int, store: str, epoch: int | None) -> int | None:
        """How many partitions the store's state has at ``epoch`` (None: the newest);
        None when the store is not listed."""
        found = self.layouts.get((operator_id, store or "default"))
        if not found:
            return None
        if epoch is None:
            return found[-1][1]
        return next((count for first, count in reversed(found) if first <= epoch), found[0][1])

    def relaid(self, operator_id: int, store: str) -> bool:
        """Whether the store's partition count changed within the epochs listed: a key's
        partition then depends on the epoch read."""
        return len(self.layouts.get((operator_id, store or "default"), ())) > 1

    @property
    def newest_epoch(self) -> int:
        """The newest epoch a replica of the location holds (-1: none): layouts are
        known up to it."""
        return max((r.newest_epoch for s in self.shards for r in s.replicas), default=-1)

    @classmethod
    def of(cls, response: pb.LocateResponse, answered_by: str) -> Location:
        """``response`` as a location; a replica without an address is the daemon ``answered_by``."""
        shards = tuple(
            Shard(
                s.first_partition,
                s.last_partition,
                tuple(
                    Replica(
                        r.node,
                        r.address or answered_by,
                        r.serving,
                        r.newest_epoch,
                        r.oldest_epoch,
                        r.query_id,
                    )
                    for r in s.replicas
                ),
            )
            for s in response.shards
        )
        layouts = {
            (s.operator_id, s.store or "default"): tuple(
                (lt.first_epoch, lt.num_partitions) for lt in s.layouts
            )
            or ((0, s.num_partitions),)
            for s in response.stores
        }
        return cls(response.job, response.query_id, layouts, shards, time.monotonic())

    def shard_of(self, partition: int) -> Shard | None:
        return next((s for s in self.shards if s.covers(partition)), None)

    @property
    def single(self) -> bool:
        """One shard holds every partition: no key needs its partition computed. (One shard
        of some partitions, a daemon holding only those, is not: keys of the others have
        nowhere to go.)"""
        return len(self.shards) == 1 and (self.shards[0].first, self.shards[0].last) == (0, LAST_PARTITION)


class Replicas:
    """One channel (and stubs) per daemon address, of ``connections`` connections each (None:
    :func:`~epochstate.client.channels.connections_for`'s default); which addresses failed
    lately. Thread-safe."""

    def __init__(
        self, tls: TlsOptions | None, options: tuple[tuple[str, int], ...], connections: int | None = None
    ) -> None:
        self._tls = tls
        self._options = options
        self._connections = connections
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        # Like ``_failed`` below: replaced whole under the lock, read without it.
        self._stubs: dict[str, pb_grpc.EpochStateStub] = {}
        self._routing: dict[str, pb_grpc.RoutingStub] = {}
        # Address -> when it failed: a dict never changed once published, replaced whole
        # under the lock, so that every read (one per routed call) takes no lock.
        self._failed: dict[str, float] = {}
        self._random = random.Random()

    def stub(self, address: str) -> pb_grpc.EpochStateStub:
        stub = self._stubs.get(address)
        if stub is None:
            with self._lock:
                stub = self._stubs.get(address)
                if stub is None:
                    stub = pb_grpc.EpochStateStub(self._channel(address))
                    self._stubs = {**self._stubs, address: stub}
        return stub

    def routing(self, address: str) -> pb_grpc.RoutingStub:
        with self._lock:
            stub = self._routing.get(address)
            if stub is None:
                stub = self._routing[address] = pb_grpc.RoutingStub(self._channel(address))
            return stub

    def _channel(self, address: str) -> grpc.Channel:
        channel = self._channels.get(address)
        if channel is None:
            connections = connections_for(address, self._connections)
            channel = self._channels[address] = open_channel(address, self._tls, self._options, connections)
        return channel

    def failed(self, address: str) -> None:
        """``address`` failed a call (unreachable): try it after the others for a while."""
        with self._lock:
            self._failed = {**self._failed, address: time.monotonic()}

    def answered(self, address: str) -> None:
        if address not in self._failed:  # the common case: nothing to publish
            return
        with self._lock:
            self._failed = {a: t for a, t in self._failed.items() if a != address}

    def suspect(self, address: str) -> bool:
        since = self._failed.get(address)
        return since is not None and time.monotonic() - since < SUSPECT_SECONDS

    def order(self, replicas: tuple[Replica, ...], wanted: Callable[[Replica], bool]) -> list[Replica]:
        """``replicas`` to try in turn: serving, not suspect and ``wanted`` first (in random
        order, which spreads the load), then the serving ones, then suspects; never a
        replica that is not serving."""
        serving = [r for r in replicas if r.serving and r.address]
        if len(serving) < 2:
            return serving
        self._random.shuffle(serving)
        if not self._failed:
            return sorted(serving, key=lambda r: not wanted(r))
        return sorted(serving, key=lambda r: (self.suspect(r.address), not wanted(r)))

    def close(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs = {}
            self._routing.clear()
        for channel in channels:
            channel.close()
