"""Reads of an alias: the one place where a read's name becomes the job answering it.

An alias (``core.alias``) is a logical job name whose epochs are the epochs of
the input subject its jobs read aligned. A read of alias epoch ``k`` is a read
of the job answering ``k`` (:meth:`AliasChain.answering`) at that job's epoch
that read input epoch ``k`` (its source mapping in ZooKeeper), and its answer
says ``k``, the job and the job's epoch. So an answer pinned to an alias epoch
is the same before and after a swap, on every daemon.

An epoch after the swap epoch of a swap not decided yet has no job: a read of it
waits (or fails EPOCH_NOT_READY without ``wait``), exactly as for an epoch not
committed yet, and is never answered by the old job first and the new one later.
``latest`` of an alias is the newest epoch whose job is known and has ingested
it; while a swap is undecided that is at most its swap epoch.

Freshness: every resolution catches up with ZooKeeper first (as ``aligned_with``
does, :meth:`SubjectView.catch_up`), so a swap ZooKeeper acknowledged before the
read is never missed; the chains are cached with watches between resolutions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.protocol.states import KazooState, WatchedEvent

from epochstate.core.alias.chain import AliasChain
from epochstate.core.alias.errors import AmbiguousName
from epochstate.core.alias.registry import AliasRegistry
from epochstate.core.alignment.errors import RegistryUnavailable as AlignmentUnavailable
from epochstate.core.zookeeper.errors import RegistryUnavailable
from epochstate.core.zookeeper.session import CONNECTION_ERRORS, wait
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.alias_epochs import AliasEpochs, AliasTarget
from epochstate.daemon.server.epochs import BadSelector, EpochNotReady, EpochWaitTimedOut
from epochstate.daemon.store.catalog import Catalog
from epochstate.v1 import epochstate_pb2 as pb


class Aliases:
    """The aliases under the registry's root, for reads; safe to share between threads.

    Raises (every call): RegistryUnavailable when ZooKeeper does not answer in time.
    """

    def __init__(
        self,
        registry: AliasRegistry,
        view: SubjectView,
        catalog: Catalog,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.view = view
        self.catalog = catalog
        self.epochs = AliasEpochs(view, catalog)
        self._clock = clock
        self._lock = threading.Lock()
        # name -> chain (None: no such alias), dropped by a watch; a read that a watch
        # overtook (the generation moved on while it read) is not kept: it may be stale.
        self._chains: dict[str, AliasChain | None] = {}
        self._names: frozenset[str] | None = None
        self._known: frozenset[str] = frozenset()  # the names last read, kept through outages
        self._generation = 0
        # Watches may be lost with the connection: what they guard is dropped with it.
        registry.client.add_listener(self._on_state)

    # -- names -----------------------------------------------------------------

    def check_job_name(self, name: str) -> None:
        """Refuse (AmbiguousName) a read of followed job ``name`` that is an alias too.

        Asked on every read of a job, so it reads the alias names from a cache and
        never fails the read on ZooKeeper's account: without ZooKeeper the job is meant.
        """
        if not self.registry.client.connected:
            return
        if name in self._alias_names():
            raise AmbiguousName(
                f"{name!r} is a job this daemon follows and an alias: delete the alias or rename it",
                metadata={"job": name},
            )

    def chain(self, name: str) -> AliasChain | None:
        """Alias ``name``'s chain as ZooKeeper holds it now; None if there is no such alias."""
        self.view.catch_up()
        return self._chain(name)

    def find(self, name: str) -> AliasChain | None:
        """Like :meth:`chain`, for a name that is no followed job: without ZooKeeper, a name not
        among the aliases last known stays an unknown job (None) rather than a registry failure."""
        if self.registry.client.connected:
            self._alias_names()  # what is known of the names if ZooKeeper goes away
        try:
            return self.chain(name)
        except (RegistryUnavailable, AlignmentUnavailable):
            if name not in self._known:
                return None
            raise

    def _chain(self, name: str) -> AliasChain | None:
        with self._lock:
            if name in self._chains:
                return self._chains[name]
            generation = self._generation
        found = self.registry.chain(name, lambda event: self._forget(name))
        with self._lock:
            if generation == self._generation:
                self._chains[name] = found
        return found

    def _alias_names(self) -> frozenset[str]:
        """The alias names, cached until the folder's children change (a watch drops them)."""
        names = self._names
        if names is not None:
            return names

        def changed(event: WatchedEvent) -> None:
            self._forget(None)

        client, folder, timeout = self.registry.client, self.registry.layout.aliases, self.registry.timeout
        with self._lock:
            generation = self._generation
        try:
            if wait(client.exists_async(folder, watch=changed), timeout) is None:
                names = frozenset()
            else:
                names = frozenset(wait(client.get_children_async(folder, watch=changed), timeout))
        except (*CONNECTION_ERRORS, NoNodeError, NoAuthError):
            return frozenset()  # not cached: asked again by the next read
        with self._lock:
            if generation == self._generation:
                self._names = names
            self._known = names
        return names

    def close(self) -> None:
        self.registry.client.remove_listener(self._on_state)

    def _on_state(self, state: KazooState) -> None:
        if state != KazooState.CONNECTED:
            with self._lock:
                self._generation += 1
                self._chains.clear()
                self._names = None

    def _forget(self, name: str | None) -> None:
        """Drop alias ``name``'s chain (None: the names). Runs on kazoo's event thread:
        takes only this lock."""
        with self._lock:
            self._generation += 1
            if name is None:
                self._names = None
            else:
                self._chains.pop(name, None)

    # -- epochs ----------------------------------------------------------------

    def target(
        self, chain: AliasChain, selector: pb.EpochSelector, time_left: Callable[[], float | None]
    ) -> AliasTarget:
        """The job and its epoch answering the alias epoch ``selector`` names.

        Selectors: ``exact`` (waiting with ``wait``), ``latest``, ``at_least`` and
        ``aligned_with`` (a job reading or writing the alias's input, or reading its
        output subject aligned). Whether the job's epoch is ingested is the caller's
        business: it reads it as ``exact`` with ``wait``.

        Raises:
            BadSelector: ``covers`` or ``as_of_time`` (not offered on an alias).
            EpochNotReady: not known yet and the read does not wait.
            EpochWaitTimedOut: not known by the deadline.
            EpochRetired, NoSuchEpoch: the epoch can never be answered.
            JobNotFound: the job answering it is not followed by this daemon.
        """
        kind = selector.WhichOneof("kind") or "latest"
        name = chain.alias.name
        waits = kind in ("at_least", "aligned_with") or selector.wait
        timeout = time_left() if waits else 0.0
        deadline = None if timeout is None else self._clock() + timeout
        if kind in ("covers", "as_of_time"):
            raise BadSelector(f"{kind} is not offered on alias {name!r}: read its jobs by name")
        while True:
            generation = self.view.generation
            found, pending = self.epochs.attempt(chain, kind, selector)
            if found is not None:
                return found
            if not waits:
                raise EpochNotReady(pending, metadata={"job": name})
            remaining = None if deadline is None else deadline - self._clock()
            if remaining is not None and remaining <= 0:
                raise EpochWaitTimedOut(f"{pending} before the deadline", metadata={"job": name})
            # A swap decided or a mapping recorded wakes this at once; ingest is looked at again.
            self.view.wait_for_change(generation, 0.1 if remaining is None else min(remaining, 0.1))
            self.view.catch_up()
            chain = self._chain(name) or chain

    def through_alias(
        self, selector: pb.EpochSelector, time_left: Callable[[], float | None]
    ) -> pb.EpochSelector:
        """An ``aligned_with`` naming an alias as its other job, as one naming the job that
        answers that alias epoch, at its own epoch; any other selector as it is."""
        aligned = selector.aligned_with
        if not self.registry.client.connected or aligned.job not in self._alias_names():
            return selector
        chain = self.chain(aligned.job)
        if chain is None:
            return selector
        target = self.target(chain, pb.EpochSelector(exact=aligned.epoch, wait=True), time_left)
        return pb.EpochSelector(
            aligned_with=pb.AlignedWith(job=target.job, epoch=target.job_epoch, subject=aligned.subject)
        )

    # -- description -------------------------------------------------------------

    @staticmethod
    def info(chain: AliasChain) -> pb.AliasInfo:
        """What DescribeJob says of the alias: which job answers which of its epochs."""
        alias = chain.alias
        info = pb.AliasInfo(name=alias.name, subject=alias.subject, input=alias.input)
        for segment in chain.segments:
            job = info.jobs.add(job=segment.job, swap=segment.swap or 0)
            if segment.after is not None:
                job.from_epoch = segment.after + 1
            if segment.until is not None:
                job.to_epoch = segment.until
        if chain.pending is not None:
            info.undecided_after = chain.pending.epoch
            info.pending_swap = chain.pending.id
        return info
