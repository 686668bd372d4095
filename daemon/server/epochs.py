"""Resolving an :class:`EpochSelector` to one queryable epoch (the read contract).

Guarantees: the epoch returned is committed, ingested and retained in the view
the caller reads from. Errors say why no such epoch exists:

* :class:`EpochRetired` — older than retention (OUT_OF_RANGE);
* :class:`EpochNotReady` — not committed or not ingested yet (FAILED_PRECONDITION);
* :class:`EpochWaitTimedOut` — waited until the deadline (DEADLINE_EXCEEDED);
* :class:`EpochUnavailable` — committed, but its files cannot be read (DATA_LOSS).
"""

from __future__ import annotations

from dataclasses import dataclass

from epochstate.daemon.errors import EpochStateError
from epochstate.daemon.ingest.catalog import Catalog, JobEntry
from epochstate.daemon.store.descriptors import JobProgress
from epochstate.daemon.store.versioned import StoreView, VersionedStore
from epochstate.v1 import epochstate_pb2 as pb


class EpochError(EpochStateError):
    """Root of epoch-selection errors."""


class EpochRetired(EpochError):
    pass


class EpochNotReady(EpochError):
    pass


class EpochWaitTimedOut(EpochError):
    pass


class BadSelector(EpochError):
    pass


class EpochUnavailable(EpochError):
    """The epoch committed, but its state files cannot be read."""


@dataclass(frozen=True)
class Pinned:
    """A view of the store and the epoch a read is pinned to within it."""

    view: StoreView
    epoch: int


def _range_text(p: JobProgress) -> str:
    if p.empty:
        return "nothing is queryable yet"
    return f"queryable epochs are {p.oldest}..{p.newest}"


def resolve(
    store: VersionedStore,
    catalog: Catalog,
    entry: JobEntry,
    selector: pb.EpochSelector,
    timeout: float | None,
) -> Pinned:
    """Pin a read of ``entry`` to the epoch ``selector`` names, waiting if it allows.

    ``timeout`` is the time left until the call's deadline (None: no deadline).
    """
    name = entry.descriptor.name
    job_id = entry.descriptor.job_id
    kind = selector.WhichOneof("kind") or "latest"
    if kind in ("exact", "at_least") and getattr(selector, kind) < 0:
        raise BadSelector(f"epoch must be >= 0, got {getattr(selector, kind)}")
    target = selector.exact if kind == "exact" else selector.at_least if kind == "at_least" else 0
    may_wait = kind == "at_least" or selector.wait

    def ready(p: JobProgress) -> bool:
        return not p.empty and p.newest >= target

    view = store.view()
    progress = view.progress(job_id)
    if not ready(progress):
        problem = entry.problems.get(target) if kind == "exact" else None
        if problem is not None:
            raise EpochUnavailable(f"epoch {target} of job {name!r} cannot be served: {problem}")
        if not may_wait:
            if kind == "latest":
                raise EpochNotReady(f"job {name!r} has no queryable epoch yet")
            committed = entry.committed
            state = "has not committed yet" if committed < target else "is committed but not ingested yet"
            raise EpochNotReady(f"epoch {target} of job {name!r} {state}; {_range_text(progress)}")
        if catalog.wait_until(name, ready, timeout) is None:
            raise EpochWaitTimedOut(
                f"epoch {target} of job {name!r} did not become queryable before the deadline;"
                f" {_range_text(catalog.get(name).progress)}"
            )
        view = store.view()
        progress = view.progress(job_id)
    if kind == "exact":
        if target < progress.oldest:
            raise EpochRetired(
                f"epoch {target} of job {name!r} is older than retention; {_range_text(progress)}"
            )
        return Pinned(view, target)
    return Pinned(view, progress.newest)
