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
from dataclasses import dataclass

from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.protocol.states import KazooState, WatchedEvent

from epochstate.core.alias.chain import AliasChain, Segment
from epochstate.core.alias.errors import AmbiguousName
from epochstate.core.alias.registry import AliasRegistry
from epochstate.core.zookeeper.session import CONNECTION_ERRORS, wait
from epochstate.core.zookeeper.subject_records import SubjectSourceRecord
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.aligned import Role
from epochstate.daemon.server.epochs import BadSelector, EpochNotReady, EpochWaitTimedOut, NoSuchEpoch
from epochstate.daemon.store.catalog import Catalog, JobNotFound
from epochstate.v1 import epochstate_pb2 as pb


@dataclass(frozen=True)
class AliasTarget:
    """Alias ``alias``'s epoch ``epoch`` is job ``job``'s epoch ``job_epoch``."""

    alias: str
    job: str
    epoch: int
    job_epoch: int


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
        self._clock = clock
        self._lock = threading.Lock()
        # name -> chain (None: no such alias), dropped by a watch; a read that a watch
        # overtook (the generation moved on while it read) is not kept: it may be stale.
        self._chains: dict[str, AliasChain | None] = {}
        self._names: frozenset[str] | None = None
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
            found, pending = self._attempt(chain, kind, selector)
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

    def _attempt(
        self, chain: AliasChain, kind: str, selector: pb.EpochSelector
    ) -> tuple[AliasTarget | None, str]:
        """The target, or None and what it waits for."""
        name = chain.alias.name
        if kind == "latest":
            return self._latest(chain)
        if kind == "at_least":
            if selector.at_least < 0:
                raise BadSelector(f"at_least must be >= 0, got {selector.at_least}")
            newest, why = self._latest(chain)
            if newest is not None and newest.epoch >= selector.at_least:
                return newest, ""
            return None, why or f"alias {name!r} has no queryable epoch >= {selector.at_least} yet"
        if kind == "aligned_with":
            epoch, why = self._aligned(chain, selector.aligned_with)
            if epoch is None:
                return None, why
            return self._exact(chain, epoch)
        if selector.exact < 0:
            raise BadSelector(f"exact epoch must be >= 0, got {selector.exact}")
        return self._exact(chain, selector.exact)

    def _exact(self, chain: AliasChain, epoch: int) -> tuple[AliasTarget | None, str]:
        name = chain.alias.name
        segment = chain.answering(epoch)
        if segment is None:
            swap = chain.pending
            assert swap is not None
            return None, (
                f"epoch {epoch} of alias {name!r} is after the swap epoch {swap.epoch} of swap {swap.id} "
                f"({swap.old!r} -> {swap.new!r}), which is {swap.state}: not decided yet"
            )
        self.require_followed(chain, segment, epoch)
        job_epoch = self._role(chain, segment.job).epoch_of(epoch)
        if job_epoch is None:
            return None, (
                f"job {segment.job!r} (answering epoch {epoch} of alias {name!r}) did not read "
                f"epoch {epoch} of {chain.alias.input!r} yet"
            )
        return AliasTarget(name, segment.job, epoch, job_epoch), ""

    def _latest(self, chain: AliasChain) -> tuple[AliasTarget | None, str]:
        """The newest alias epoch whose job has ingested it (None: none yet)."""
        name = chain.alias.name
        for index in range(len(chain.segments) - 1, -1, -1):
            segment = chain.segments[index]
            if index == len(chain.segments) - 1:
                self.require_followed(chain, segment, None)
            try:
                progress = self.catalog.get(segment.job).progress
            except JobNotFound:
                continue
            source = self._source(chain, segment.job)
            if progress.empty or source is None:
                continue
            read = [j for j in source.mapping if j <= progress.newest]
            if not read:
                continue
            epoch = source.mapping[max(read)]
            end = segment.until
            if index == len(chain.segments) - 1 and chain.pending is not None:
                end = chain.pending.epoch
            if end is not None:
                epoch = min(epoch, end)
            if segment.after is not None and epoch <= segment.after:
                continue  # the new job has not passed the swap epoch yet: the old one answers
            job_epoch = source.source_epoch_of(epoch)
            if job_epoch is None or job_epoch < progress.oldest:
                continue
            return AliasTarget(name, segment.job, epoch, job_epoch), ""
        return None, f"alias {name!r} has no queryable epoch yet"

    def _aligned(self, chain: AliasChain, aligned: pb.AlignedWith) -> tuple[int | None, str]:
        """The alias epoch aligned with epoch ``aligned.epoch`` of job ``aligned.job``.

        Through the input (the job reads it aligned, or writes it: the same input
        epoch) or the output subject (the job reads it aligned: the input epoch whose
        output it read, from the old job's batch or after a swap's handover).
        """
        name, other, epoch = chain.alias.name, aligned.job, aligned.epoch
        if not other or epoch < 0:
            raise BadSelector(f"aligned_with needs a job and an epoch >= 0, got {other!r} and {epoch}")
        alias = chain.alias
        subjects = [aligned.subject] if aligned.subject else [alias.input, alias.subject]
        for topic in subjects:
            source = self.view.source(topic, other)
            writer = self.view.writer(topic)
            writes = topic == alias.input and writer is not None and writer.writer == other
            if source is None and not writes:
                continue
            role = Role(other, topic, writes, source if not writes else None)
            subject_epoch = role.subject_epoch(epoch)
            if subject_epoch is None:
                return None, f"job {other!r} did not read its epoch {epoch} from subject {topic!r} yet"
            if topic == alias.input:
                return subject_epoch, ""
            if topic == alias.subject:
                return self._input_of_output(chain, subject_epoch)
        raise NoSuchEpoch(
            f"job {other!r} neither reads nor writes the input {alias.input!r} of alias {name!r}, "
            f"nor reads its output {alias.subject!r} aligned"
        )

    def _input_of_output(self, chain: AliasChain, output: int) -> tuple[int | None, str]:
        """The input epoch whose output is output epoch ``output`` of the alias's subject."""
        record = self.view.epoch(chain.alias.subject, output)
        if record is None:
            return None, f"output epoch {output} of {chain.alias.subject!r} is not registered yet"
        segment = chain.segment_of(record.writer)
        if segment is None:
            raise NoSuchEpoch(
                f"output epoch {output} of {chain.alias.subject!r} was written by {record.writer!r}, "
                f"which is none of alias {chain.alias.name!r}'s jobs"
            )
        if segment.swap is None:
            # The first job writes output epoch n in its batch n.
            input_epoch = self._role(chain, segment.job).subject_epoch(output)
            if input_epoch is None:
                return None, f"job {segment.job!r}'s batch {output} is not in its mapping yet"
            return input_epoch, ""
        if segment.handover is None or segment.after is None:
            return None, f"swap {segment.swap} to {segment.job!r} is not done yet"
        return segment.after + output - segment.handover, ""

    # -- plumbing --------------------------------------------------------------

    def require_followed(self, chain: AliasChain, segment: Segment, epoch: int | None) -> None:
        """JobNotFound, naming the alias, when this daemon does not follow ``segment``'s job."""
        try:
            self.catalog.get(segment.job)
        except JobNotFound:
            which = "its newest epochs" if epoch is None else f"its epoch {epoch}"
            raise JobNotFound(
                f"alias {chain.alias.name!r} is answered ({which}) by job {segment.job!r}, "
                "which this daemon does not follow",
                metadata={"job": segment.job},
            ) from None

    def _source(self, chain: AliasChain, job: str) -> SubjectSourceRecord | None:
        return self.view.source(chain.alias.input, job)

    def _role(self, chain: AliasChain, job: str) -> Role:
        source = self._source(chain, job)
        if source is None:
            raise NoSuchEpoch(
                f"job {job!r} of alias {chain.alias.name!r} does not read its input {chain.alias.input!r}"
            )
        return Role(job, chain.alias.input, False, source)

    # -- description -------------------------------------------------------------

    def newest(self, chain: AliasChain) -> AliasTarget | None:
        """The target of a ``latest`` read of the alias now; None: nothing queryable yet."""
        return self._latest(chain)[0]

    def alias_epoch(self, chain: AliasChain, segment: Segment, job_epoch: int) -> int | None:
        """The alias epoch that ``segment``'s job answers with its epoch ``job_epoch``; None if
        it answers none with it (another job answers that input epoch, or nobody yet)."""
        source = self._source(chain, segment.job)
        epoch = None if source is None else source.mapping.get(job_epoch)
        if epoch is None or chain.answering(epoch) != segment:
            return None
        return epoch

    def followed(self, chain: AliasChain) -> list[Segment]:
        """The segments whose job this daemon follows, oldest first."""
        found = []
        for segment in chain.segments:
            try:
                self.catalog.get(segment.job)
            except JobNotFound:
                continue
            found.append(segment)
        return found

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
