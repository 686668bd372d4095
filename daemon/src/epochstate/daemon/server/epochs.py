"""Resolving an :class:`EpochSelector` to one queryable epoch (the read contract).

Guarantees: the epoch returned is committed, ingested and retained in the view
the caller reads from. Errors say why no such epoch exists:

* :class:`EpochRetired` — older than retention (OUT_OF_RANGE);
* :class:`EpochNotReady` — not committed or not ingested yet (FAILED_PRECONDITION);
* :class:`EpochWaitTimedOut` — waited until the deadline (DEADLINE_EXCEEDED);
* :class:`EpochUnavailable` — committed, but its files cannot be read (DATA_LOSS);
* :class:`NoSuchEpoch` — no epoch can ever satisfy the selector (FAILED_PRECONDITION);
* :class:`IncarnationChanged` — the read's query is no longer the one the job's
  checkpoint holds: it was recreated while the read ran (FAILED_PRECONDITION).

``aligned_with`` is resolved in two steps: the registry names the epoch
(``AlignedEpochs``, :mod:`epochstate.daemon.server.aligned`), then it is read like
``exact`` with ``wait``, within what is left of the same deadline.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError
from epochstate.daemon.server.positions import Position, covers, describe, end_position, start_position
from epochstate.daemon.store.catalog import Catalog, JobEntry
from epochstate.daemon.store.descriptors import EpochRecord, JobProgress
from epochstate.daemon.store.view import StoreView
from epochstate.v1 import epochstate_pb2 as pb


class EpochStore(Protocol):
    """What resolving reads of the store: views (each a consistent state) and epoch records."""

    def view(self) -> StoreView: ...

    def epochs(self, job_id: int, from_epoch: int = 0, limit: int = 0) -> list[EpochRecord]: ...


class EpochError(EpochStateError):
    """Root of epoch-selection errors."""


class EpochRetired(EpochError):
    reason = reasons.EPOCH_RETIRED


class EpochNotReady(EpochError):
    reason = reasons.EPOCH_NOT_READY


class EpochWaitTimedOut(EpochError):
    reason = reasons.EPOCH_WAIT_TIMED_OUT


class BadSelector(EpochError):
    reason = reasons.BAD_SELECTOR


class EpochUnavailable(EpochError):
    """The epoch committed, but its state files cannot be read."""

    reason = reasons.EPOCH_UNAVAILABLE


class NoSuchEpoch(EpochError):
    """No epoch of the job can ever satisfy the selector (e.g. it reads other topics)."""

    reason = reasons.NO_SUCH_EPOCH


class IncarnationChanged(EpochError):
    """The read is pinned to a query the job's checkpoint no longer holds (it was recreated)."""

    reason = reasons.INCARNATION_CHANGED

    @classmethod
    def of(cls, job: str, requested: str, current: str, what: str) -> IncarnationChanged:
        """The refusal of ``what`` (e.g. "the read"), pinned to query ``requested`` of
        ``job`` while the job's checkpoint holds query ``current`` ("": not followed yet)."""
        now = f"query {current}" if current else "a new query, not followed yet"
        return cls(
            f"{what} is pinned to query {requested} of job {job!r}, but the job's checkpoint was "
            f"recreated and holds {now}, whose epochs restart at 0; query {requested}'s answers stay "
            f"as given, it gives no new ones",
            metadata={"job": job, "requestedQueryId": requested, "currentQueryId": current},
        )


def _wanted(position: pb.Position) -> Position:
    if not position.offsets:
        raise BadSelector("covers needs at least one topic-partition offset")
    wanted: Position = {}
    for o in position.offsets:
        if not o.topic or o.partition < 0 or o.offset < 0:
            raise BadSelector(f"covers: bad topic-partition offset {o.topic!r}[{o.partition}]@{o.offset}")
        wanted[(o.topic, o.partition)] = o.offset
    return wanted


def _covering(
    store: EpochStore,
    name: str,
    job_id: int,
    progress: JobProgress,
    wanted: Position,
    unavailable: Mapping[int, str],
) -> int | None:
    """The earliest queryable epoch (within ``progress``) whose end covers ``wanted``.

    Raises EpochUnavailable when that may be an epoch skipped as unreadable (it has
    no record, so whether it covers ``wanted`` is unknown)."""
    if progress.empty:
        return None
    records = [r for r in store.epochs(job_id, progress.oldest) if r.epoch <= progress.newest]
    if not records:
        return None
    reads = end_position(records[-1])
    unknown = [tp for tp in wanted if tp not in reads]
    if unknown:
        raise NoSuchEpoch(
            f"job {name!r} reads none of {describe((tp, wanted[tp]) for tp in unknown)}; "
            f"it reads {', '.join(sorted(f'{t}[{p}]' for t, p in reads)) or 'no Kafka partitions'}"
        )
    if covers(start_position(records[0]), wanted):
        raise EpochRetired(
            f"the earliest epoch of job {name!r} covering {describe(wanted.items())} is older than "
            f"retention; {_range_text(progress)}"
        )
    previous = records[0].epoch
    for r in records:
        if covers(end_position(r), wanted):
            skipped = sorted(e for e in unavailable if previous < e < r.epoch)
            if skipped:
                raise EpochUnavailable(
                    f"the earliest epoch of job {name!r} covering {describe(wanted.items())} may be "
                    f"epoch {skipped[0]}, which cannot be served: {unavailable[skipped[0]]}"
                )
            return r.epoch
        previous = r.epoch
    return None


def _resolve_covers(
    store: EpochStore,
    catalog: Catalog,
    entry: JobEntry,
    position: pb.Position,
    timeout: float | None,
    abandoned: Callable[[], bool],
) -> Pinned:
    name = entry.descriptor.name
    job_id = entry.descriptor.job_id
    wanted = _wanted(position)
    view = store.view()
    gaps = entry.unavailable
    epoch = _covering(store, name, job_id, view.progress(job_id), wanted, gaps)
    if epoch is None:
        _refuse_dropped(view, catalog, entry, 0, view.progress(job_id))

        def covered(p: JobProgress) -> bool:
            return _covering(store, name, job_id, p, wanted, gaps) is not None

        if catalog.wait_until(name, covered, timeout, abandoned) is None:
            raise EpochWaitTimedOut(
                f"no epoch of job {name!r} covering {describe(wanted.items())} became queryable "
                f"before the deadline; {_range_text(catalog.get(name).progress)}"
            )
        view = store.view()
        epoch = _covering(store, name, job_id, view.progress(job_id), wanted, gaps)
        if epoch is None:  # retention moved past it between the wait and the view
            raise EpochRetired(f"the epoch of job {name!r} covering {describe(wanted.items())} was retired")
    return Pinned(view, epoch)


def _as_of(
    store: EpochStore,
    name: str,
    job_id: int,
    progress: JobProgress,
    at_ms: int,
    unavailable: Mapping[int, str],
) -> int | None:
    """The newest queryable epoch committed at or before ``at_ms``, known once an epoch
    committed after it is queryable (until then a later epoch may still commit before
    ``at_ms``): None while it is not known."""
    if progress.empty:
        return None
    records = [r for r in store.epochs(job_id, progress.oldest) if r.epoch <= progress.newest]
    if not records or records[-1].committed_at_ms <= at_ms:
        return None
    if records[0].committed_at_ms > at_ms:
        if records[0].epoch == 0:
            raise NoSuchEpoch(f"job {name!r} committed its first epoch after {at_ms} ms")
        raise EpochRetired(
            f"the epoch of job {name!r} as of {at_ms} ms is older than retention; {_range_text(progress)}",
            metadata={"job": name, "oldestEpoch": str(progress.oldest), "newestEpoch": str(progress.newest)},
        )
    found, after = records[0].epoch, records[-1].epoch
    for record, following in itertools.pairwise(records):
        if following.committed_at_ms > at_ms:
            found, after = record.epoch, following.epoch
            break
    skipped = sorted(e for e in unavailable if found < e < after)
    if skipped:
        # Skipped epochs have no record: one of them may be the answer.
        raise EpochUnavailable(
            f"the epoch of job {name!r} as of {at_ms} ms may be epoch {skipped[-1]}, which cannot be "
            f"served: {unavailable[skipped[-1]]}"
        )
    return found


def _resolve_as_of(
    store: EpochStore,
    catalog: Catalog,
    entry: JobEntry,
    at_ms: int,
    timeout: float | None,
    abandoned: Callable[[], bool],
) -> Pinned:
    name, job_id = entry.descriptor.name, entry.descriptor.job_id
    if at_ms < 0:
        raise BadSelector(f"as_of_time must be >= 0 (ms since the Unix epoch), got {at_ms}")
    gaps = entry.unavailable
    view = store.view()
    epoch = _as_of(store, name, job_id, view.progress(job_id), at_ms, gaps)
    if epoch is None:
        _refuse_dropped(view, catalog, entry, 0, view.progress(job_id))

        def known(p: JobProgress) -> bool:
            return _as_of(store, name, job_id, p, at_ms, gaps) is not None

        if catalog.wait_until(name, known, timeout, abandoned) is None:
            raise EpochWaitTimedOut(
                f"no epoch of job {name!r} committed after {at_ms} ms became queryable before the "
                f"deadline, so the epoch as of that time is not known yet; "
                f"{_range_text(catalog.get(name).progress)}"
            )
        view = store.view()
        epoch = _as_of(store, name, job_id, view.progress(job_id), at_ms, gaps)
        if epoch is None:  # retention moved past it between the wait and the view
            raise EpochRetired(f"the epoch of job {name!r} as of {at_ms} ms was retired")
    return Pinned(view, epoch)


class Pinned(NamedTuple):
    """A view of the store and the epoch a read is pinned to within it."""

    # A tuple, not a frozen dataclass: one is made per read, and a frozen dataclass's
    # __init__ (object.__setattr__ per field) was a measurable part of a Get.
    view: StoreView
    epoch: int


def _epoch_metadata(job: str, epoch: int, p: JobProgress) -> dict[str, str]:
    """An epoch error's ``ErrorInfo.metadata``: the job, the epoch asked, the queryable range."""
    metadata = {"job": job, "epoch": str(epoch)}
    if not p.empty:
        metadata |= {"oldestEpoch": str(p.oldest), "newestEpoch": str(p.newest)}
    return metadata


def _range_text(p: JobProgress) -> str:
    if p.empty:
        return "nothing is queryable yet"
    return f"queryable epochs are {p.oldest}..{p.newest}"


def _never() -> bool:
    return False


class AlignedEpochs(Protocol):
    """Where ``aligned_with`` selectors are resolved: the subjects in ZooKeeper."""

    def epoch_of(self, entry: JobEntry, aligned: pb.AlignedWith, timeout: float | None) -> int:
        """The epoch of ``entry``'s job aligned with ``aligned`` (it may not be queryable yet)."""
        ...


def _resolve_aligned(
    store: EpochStore,
    catalog: Catalog,
    entry: JobEntry,
    aligned: pb.AlignedWith,
    timeout: float | None,
    alignment: AlignedEpochs | None,
    abandoned: Callable[[], bool],
) -> Pinned:
    name = entry.descriptor.name
    if alignment is None:
        raise NoSuchEpoch(
            f"aligned_with needs the subject registry, but this daemon runs without ZooKeeper "
            f"(set zookeeper); cannot align job {name!r} with job {aligned.job!r}"
        )
    deadline = None if timeout is None else time.monotonic() + timeout
    epoch = alignment.epoch_of(entry, aligned, timeout)
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        exact = pb.EpochSelector(exact=epoch, wait=True)
        return resolve(store, catalog, entry, exact, lambda: remaining, abandoned=abandoned)
    except EpochError as error:
        raise type(error)(
            f"(aligned with epoch {aligned.epoch} of job {aligned.job!r}) {error}", metadata=error.metadata
        ) from error


def resolve(
    store: EpochStore,
    catalog: Catalog,
    entry: JobEntry,
    selector: pb.EpochSelector,
    time_left: Callable[[], float | None],
    alignment: AlignedEpochs | None = None,
    abandoned: Callable[[], bool] = _never,
) -> Pinned:
    """Pin a read of ``entry`` to the epoch ``selector`` names, waiting if it allows.

    ``time_left()`` is the time left until the call's deadline (None: no deadline);
    it is asked only when the read has to wait or look further than the store.
    ``alignment`` resolves ``aligned_with`` selectors (None: no ZooKeeper, they fail).
    ``abandoned()`` says the caller went away: a wait for the catalog then ends with
    WaitAbandoned (see :meth:`Catalog.wait_until`; whoever sets it wakes the catalog).
    """
    kind = selector.WhichOneof("kind") or "latest"
    if kind == "covers":
        return _resolve_covers(store, catalog, entry, selector.covers, time_left(), abandoned)
    if kind == "as_of_time":
        return _resolve_as_of(store, catalog, entry, selector.as_of_time, time_left(), abandoned)
    if kind == "aligned_with":
        return _resolve_aligned(
            store, catalog, entry, selector.aligned_with, time_left(), alignment, abandoned
        )
    target = 0
    if kind == "exact":
        target = selector.exact
        if target in entry.unavailable:
            # Skipped for good: the versions stored around it are not its state.
            raise EpochUnavailable(
                f"epoch {target} of job {entry.descriptor.name!r} cannot be served: "
                f"{entry.unavailable[target]}"
            )
    elif kind == "at_least":
        target = selector.at_least
    if target < 0:
        raise BadSelector(f"epoch must be >= 0, got {target}")
    view = store.view()
    progress = view.progress(entry.descriptor.job_id)
    if progress.newest < target or progress.empty:
        _refuse_dropped(view, catalog, entry, target, progress)
        view, progress = _wait_until_ready(
            store, catalog, entry, progress, kind, target, selector.wait, time_left, abandoned
        )
        _refuse_dropped(view, catalog, entry, target, progress)
    if kind == "exact":
        if target < progress.oldest:
            raise EpochRetired(
                f"epoch {target} of job {entry.descriptor.name!r} is older than retention; "
                f"{_range_text(progress)}",
                metadata=_epoch_metadata(entry.descriptor.name, target, progress),
            )
        return Pinned(view, target)
    return Pinned(view, progress.newest)


def _refuse_dropped(
    view: StoreView, catalog: Catalog, entry: JobEntry, target: int, progress: JobProgress
) -> None:
    """Refuse a read of a job the store dropped while the read held its descriptor (the
    checkpoint now holds another query): its epochs are gone, never "absent" or "not yet",
    and never answered by the new query, whose epochs restart at 0."""
    if progress.empty and view.dropped(entry.descriptor.job_id):
        raise incarnation_changed(catalog, entry, "the read")


def incarnation_changed(catalog: Catalog, entry: JobEntry, what: str) -> IncarnationChanged:
    """The refusal of ``what``, which read ``entry``'s query after the job's checkpoint was
    recreated; names the query the catalog holds now ("" if it holds none other yet)."""
    name = entry.descriptor.name
    try:
        current = catalog.get(name).descriptor.query_id
    except EpochStateError:
        current = ""
    if current == entry.descriptor.query_id:
        current = ""  # the catalog still holds the dropped entry: the new query is not followed yet
    return IncarnationChanged.of(name, entry.descriptor.query_id, current, what)


def _wait_until_ready(
    store: EpochStore,
    catalog: Catalog,
    entry: JobEntry,
    progress: JobProgress,
    kind: str,
    target: int,
    wait: bool,
    time_left: Callable[[], float | None],
    abandoned: Callable[[], bool],
) -> tuple[StoreView, JobProgress]:
    """A view whose progress reaches epoch ``target``, for a ``kind`` selector that
    ``progress`` does not reach yet: waits if the selector allows, else raises why not.

    Kept off :func:`resolve`'s path for a queryable epoch, the common read."""
    name = entry.descriptor.name
    problem = entry.problems.get(target) if kind == "exact" else None
    if problem is not None:
        raise EpochUnavailable(f"epoch {target} of job {name!r} cannot be served: {problem}")
    if not (kind == "at_least" or wait):
        if kind == "latest":
            raise EpochNotReady(f"job {name!r} has no queryable epoch yet")
        committed = entry.committed
        state = "has not committed yet" if committed < target else "is committed but not ingested yet"
        raise EpochNotReady(
            f"epoch {target} of job {name!r} {state}; {_range_text(progress)}",
            metadata=_epoch_metadata(name, target, progress),
        )

    def ready(p: JobProgress) -> bool:
        return not p.empty and p.newest >= target

    if catalog.wait_until(name, ready, time_left(), abandoned) is None:
        raise EpochWaitTimedOut(
            f"epoch {target} of job {name!r} did not become queryable before the deadline;"
            f" {_range_text(catalog.get(name).progress)}"
        )
    view = store.view()
    return view, view.progress(entry.descriptor.job_id)
