"""Which epoch of job A is aligned with epoch m of job B (the ``aligned_with`` selector).

A job touches a subject T as its *writer* (its epoch n wrote subject epoch n of
T) or as a *reader* (in aligned mode its epoch j read exactly subject epoch
``mapping[j]``). Two jobs' epochs are aligned when they map to the same subject
epoch of a subject both touch. With A writing T and B reading it, the epoch of A
aligned with B's epoch m is k = ``mapping_B[m]``: A's state right after the
epoch that emitted the records B's epoch m processes, neither older nor newer.

Resolution waits (through the :class:`SubjectView`'s watches) while B's epoch m
or A's epoch of subject epoch k is not in the registry yet; whether that epoch of
A is queryable is the caller's business (:func:`epochs.resolve`).

Incarnations: a reader's mapping names the query whose batch ids it holds. A
reader's epochs are those of the query the daemon knows for it: A's, the query
the read is pinned to; B's, the query the daemon follows (when it follows B;
otherwise the mapping's own). A mapping of another query is never used: when it
is the query the job's checkpoint holds now and the read is pinned to an older
one, the read is refused (IncarnationChanged, naming both); otherwise the
known query has not recorded its mapping yet, and the resolution waits for it.
A mapping without a query id (written before the field existed) is used as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from epochstate.core.errors import EpochStateError
from epochstate.core.zookeeper.errors import InvalidName
from epochstate.core.zookeeper.subject_records import SubjectSourceRecord
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.epochs import (
    BadSelector,
    EpochRetired,
    EpochWaitTimedOut,
    IncarnationChanged,
    NoSuchEpoch,
)
from epochstate.daemon.store.catalog import Catalog, JobEntry
from epochstate.v1 import epochstate_pb2 as pb


@dataclass(frozen=True)
class Role:
    """How ``job`` touches subject ``topic``: as its writer, as a reader (``source``), or both.

    ``query_id`` is the job's query whose epochs are meant ("" when the daemon
    knows none); ``current`` the query the daemon follows for the job now ("" if none).
    """

    job: str
    topic: str
    writes: bool
    source: SubjectSourceRecord | None
    query_id: str = ""
    current: str = ""

    def stale(self) -> str:
        """Why the reader's mapping cannot be used: "" when it can (it is the known query's,
        or one of them is unknown). Raises IncarnationChanged when the mapping is the job's
        current query's and the epochs meant are an older query's."""
        if self.writes or self.source is None:
            return ""
        recorded = self.source.query_id
        if recorded is None or not self.query_id or recorded == self.query_id:
            return ""
        if recorded == self.current:
            raise IncarnationChanged.of(
                self.job, self.query_id, recorded, f"aligning through subject {self.topic!r}"
            )
        return (
            f"job {self.job!r}'s query {self.query_id} did not record its mapping of subject "
            f"{self.topic!r} yet (the registry holds query {recorded}'s)"
        )

    def __str__(self) -> str:
        parts = ["writes" if self.writes else "", f"reads ({self.source.mode})" if self.source else ""]
        return f"{' and '.join(p for p in parts if p)} {self.topic}"

    def subject_epoch(self, epoch: int) -> int | None:
        """The subject epoch this job's ``epoch`` maps to; None while it is not recorded yet."""
        if self.writes:
            return epoch
        assert self.source is not None
        found = self.source.mapping.get(epoch)
        if found is None:
            self._never(epoch, sorted(self.source.mapping), f"its epoch {epoch}", subject=False)
        return found

    def epoch_of(self, subject_epoch: int) -> int | None:
        """This job's epoch that maps to ``subject_epoch``; None while it is not recorded yet."""
        if self.writes:
            return subject_epoch
        assert self.source is not None
        found = self.source.source_epoch_of(subject_epoch)
        if found is None:
            read = sorted(self.source.mapping.values())
            self._never(subject_epoch, read, f"an epoch reading subject epoch {subject_epoch}", subject=True)
        return found

    def _never(self, wanted: int, known: list[int], what: str, *, subject: bool) -> None:
        """Raise if ``wanted`` (a subject epoch if ``subject``) can never be recorded; return if it may be."""
        assert self.source is not None
        recorded = f"job {self.job!r}'s mapping of subject {self.topic!r}"
        retired = self.source.retired
        if retired is not None and wanted < (retired.subject_epoch if subject else retired.source_epoch):
            raise EpochRetired(
                f"{what} is older than the retention of subject {self.topic!r}, which keeps subject "
                f"epochs from {retired.subject_epoch} and {recorded} from epoch {retired.source_epoch}"
            )
        if known and wanted < known[0]:
            raise EpochRetired(
                f"{what} is not in {recorded} (it holds {known[0]}..{known[-1]}): older than the "
                "mapping's retention, or before the job read the subject aligned"
            )
        if known and wanted < known[-1]:
            raise NoSuchEpoch(f"{what} is not in {recorded}, which holds later ones: it was never aligned")
        if self.source.mode != "aligned":
            raise NoSuchEpoch(
                f"job {self.job!r} reads subject {self.topic!r} unaligned, so {what} maps to no subject epoch"
            )


class SubjectAlignment:
    """Resolves ``AlignedWith`` selectors through the subjects in ZooKeeper (an ``AlignedEpochs``)."""

    def __init__(
        self, view: SubjectView, catalog: Catalog | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.view = view
        self.catalog = catalog  # the queries the daemon follows (None: it knows only the read's)
        self._clock = clock

    def epoch_of(self, entry: JobEntry, aligned: pb.AlignedWith, timeout: float | None) -> int:
        """The epoch of ``entry``'s job (A) aligned with epoch ``aligned.epoch`` of job ``aligned.job`` (B).

        Waits up to ``timeout`` seconds (None: no limit) for the registry to know it.

        Raises:
            BadSelector: no job named, a negative epoch or a name that cannot be a job.
            NoSuchEpoch: the jobs share no subject (or several, and none is named), or
                one of them reads it unaligned.
            EpochRetired: a mapping entry needed is older than the mapping's retention.
            IncarnationChanged: a job's mapping is of the query its checkpoint holds now,
                and the read is pinned to an older query of it.
            EpochWaitTimedOut: not known by the deadline (a mapping of the known query
                was not recorded by then).
            RegistryUnavailable: ZooKeeper did not answer.
        """
        job, other, epoch = entry.descriptor.name, aligned.job, aligned.epoch
        if not other or epoch < 0:
            raise BadSelector(f"aligned_with needs a job and an epoch >= 0, got {other!r} and {epoch}")
        if other == job:
            return epoch
        deadline = None if timeout is None else self._clock() + timeout
        # Changes made before this read (by Spark's driver, an operator) must not be missed.
        self.view.catch_up()
        while True:
            generation = self.view.generation
            try:
                found, pending = self._attempt(entry, aligned)
            except InvalidName as error:
                raise BadSelector(str(error)) from error
            if found is not None:
                return found
            remaining = None if deadline is None else max(0.0, deadline - self._clock())
            if not self.view.wait_for_change(generation, remaining):
                raise EpochWaitTimedOut(f"{pending} before the deadline")

    def _attempt(self, entry: JobEntry, aligned: pb.AlignedWith) -> tuple[int | None, str]:
        """A's aligned epoch, or None and what it waits for."""
        job, other, epoch = entry.descriptor.name, aligned.job, aligned.epoch
        mine, theirs = self._shared(
            job,
            self._roles(job, entry.descriptor.query_id),
            other,
            self._roles(other, self._current(other)),
            aligned.subject,
        )
        for role in (theirs, mine):
            if stale := role.stale():
                return None, stale
        subject_epoch = theirs.subject_epoch(epoch)
        if subject_epoch is None:
            return None, f"job {other!r} did not read its epoch {epoch} from subject {mine.topic!r}"
        found = mine.epoch_of(subject_epoch)
        if found is None:
            return None, (
                f"job {job!r} did not read subject epoch {subject_epoch} of {mine.topic!r} "
                f"(read by epoch {epoch} of job {other!r})"
            )
        for role in (theirs, mine):
            self._check_written(role, subject_epoch)
        return found, ""

    def _check_written(self, role: Role, subject_epoch: int) -> None:
        """Refuse (NoSuchEpoch) a writer's epoch for a subject epoch another job wrote: after a
        hot-swap the new job writes the subject's later epochs, which no epoch of the old one
        produced (and the new job's batch ids are not the subject's epochs)."""
        if not role.writes:
            return
        record = self.view.epoch(role.topic, subject_epoch)
        if record is not None and not record.written_by(role.job, role.query_id or None):
            raise NoSuchEpoch(
                f"subject epoch {subject_epoch} of {role.topic!r} was written by job {record.writer!r}, "
                f"not by job {role.job!r} (a hot-swap handed the subject over): read the alias "
                "that follows the swap (docs/swap.md#aliases)"
            )

    def _current(self, job: str) -> str:
        """The query the daemon follows for ``job`` now; "" when it follows none."""
        if self.catalog is None:
            return ""
        try:
            return self.catalog.get(job).descriptor.query_id
        except EpochStateError:
            return ""

    def _roles(self, job: str, query_id: str) -> dict[str, Role]:
        roles: dict[str, Role] = {}
        current = self._current(job)
        for topic in self.view.topics():
            source = self.view.source(topic, job)
            written = self.view.writer(topic)
            writes = written is not None and written.written_by(job, query_id or None)
            if writes or source is not None:
                roles[topic] = Role(job, topic, writes, source, query_id, current)
        return roles

    @staticmethod
    def _shared(
        job: str, mine: Mapping[str, Role], other: str, theirs: Mapping[str, Role], subject: str
    ) -> tuple[Role, Role]:
        """The one subject both jobs touch (``subject`` if named): each job's role in it."""
        shared = [t for t in sorted(set(mine) & set(theirs)) if not subject or t == subject]
        if len(shared) == 1:
            return mine[shared[0]], theirs[shared[0]]
        if shared:
            raise NoSuchEpoch(
                f"jobs {job!r} and {other!r} share subjects {', '.join(shared)}: "
                "name one (aligned_with.subject)"
            )
        raise NoSuchEpoch(
            f"jobs {job!r} and {other!r} share no subject{f' {subject!r}' if subject else ''}: "
            f"job {job!r} {_touches(mine)}; job {other!r} {_touches(theirs)}"
        )


def _touches(roles: Mapping[str, Role]) -> str:
    return ", ".join(str(role) for role in roles.values()) or "touches no subject"
