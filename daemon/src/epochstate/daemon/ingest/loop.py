"""The ingest loop: one thread that keeps every followed job caught up.

It learns of new epochs two ways: a push (``poke``, from the Spark listener's
report) wakes it at once; otherwise it looks at each checkpoint's commit log, which
also catches up after the daemon's own downtime. Local checkpoints are looked at
every ``poll_interval`` (a directory listing costs nothing). For a checkpoint on an
object store, a look finding nothing new doubles that job's interval, from
``poll_interval`` up to ``poll_max_interval``; a new epoch or a push starts again
from ``poll_interval``. An idle remote job so costs one LIST request of
``commits/`` per ``poll_max_interval`` (the query id is read only when the commit
log went back or rewrote an entry, or a report named another query).
Waits go through one event that ``stop`` sets, so shutdown never waits for a poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from epochstate.core.errors import BadRequest, EpochStateError
from epochstate.core.partition_ranges import PartitionRanges
from epochstate.core.storage.errors import StorageError, StorageUnavailable, UnreadableFile
from epochstate.core.storage.location import redact
from epochstate.daemon.ingest.follower import EpochPublisher, IngestStats, JobFollower
from epochstate.daemon.sources.errors import SourceError
from epochstate.daemon.store.catalog import Catalog, JobEntry
from epochstate.daemon.store.descriptors import IngestNotes
from epochstate.daemon.store.versioned import VersionedStore

log = logging.getLogger(__name__)

# What makes an epoch fail for good after enough attempts: damaged or missing
# checkpoint files, and files the storage refuses. A storage that does not answer
# (StorageUnavailable) only delays ingest.
UNREADABLE = (SourceError, UnreadableFile)


class IngestError(EpochStateError):
    """Root of the ingest loop's errors."""


class CheckpointNotFound(IngestError, BadRequest):
    """FollowJob (or a report) names a checkpoint that cannot be read (no such
    checkpoint, a malformed location, a storage that refuses or does not answer):
    the request's checkpoint is wrong, not the daemon."""


class IngestLoop:
    """Drives one :class:`JobFollower` per job on a single thread."""

    def __init__(
        self,
        store: VersionedStore,
        catalog: Catalog,
        publisher: EpochPublisher,
        *,
        retention: int = 100,
        poll_interval: float = 0.1,
        poll_max_interval: float = 5.0,
        retry_interval: float = 2.0,
        skip_after_failures: int = 3,
        on_ingested: Callable[[str, IngestStats], None] | None = None,
        on_problem: Callable[[str, int, str], None] | None = None,
        on_caught_up: Callable[[str], None] | None = None,
        scratch_dir: Path | None = None,
    ) -> None:
        self._scratch_dir = scratch_dir
        self._store = store
        self._catalog = catalog
        self._publisher = publisher
        self._retention = retention
        self._poll_interval = poll_interval
        self._poll_max_interval = max(poll_interval, poll_max_interval)
        # Per job: when to look next and the interval used (grows while idle).
        self._next_look: dict[str, float] = {}
        self._idle_interval: dict[str, float] = {}
        self._retry_interval = retry_interval
        self._on_ingested = on_ingested
        self._on_problem = on_problem
        self._on_caught_up = on_caught_up
        self._paused: set[str] = set()
        self._calls: list[Callable[[], None]] = []  # run on the ingest thread (call_soon)
        self._followers: dict[str, JobFollower] = {}
        # Per job: reports not yet handed to its follower (epoch, run id, query id).
        self._reports: dict[str, list[tuple[int, str, str]]] = {}
        self._retry_at: dict[str, float] = {}
        self._skip_after = skip_after_failures
        # Per job: the epoch that keeps failing and how many attempts failed.
        self._failures: dict[str, tuple[int, int]] = {}
        # The notes last recorded per (job, job id): written again only when they change.
        self._noted: dict[tuple[str, int], IngestNotes] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ingest", daemon=True)
        # When the loop last started a pass over its jobs (health tells a hung loop by it).
        self.passed_at = time.monotonic()

    # -- control (any thread) ---------------------------------------------------------

    def follow(self, job: str, checkpoint: str, partitions: PartitionRanges | None = None) -> JobEntry:
        """Start following ``job`` at ``checkpoint``, ingesting the Spark ``partitions``
        given (None: the whole job); idempotent for the same pair (an existing follower
        is kept whatever its partitions: :meth:`unfollow` it first to change them)."""
        with self._lock:
            existing = self._followers.get(job)
            if existing is not None:
                return existing.entry
            try:
                follower = JobFollower(
                    job,
                    checkpoint,
                    self._store,
                    self._publisher,
                    self._retention,
                    scratch_dir=self._scratch_dir,
                    partitions=partitions,
                )
            except (SourceError, StorageError) as error:
                raise CheckpointNotFound(
                    f"cannot follow job {job!r} at {redact(checkpoint)!r}: {error}"
                ) from error
            self._followers[job] = follower
            self._catalog.put(follower.entry)
            self._publisher.job_followed(follower.entry)
        self.poke(job)
        return follower.entry

    def poke(self, job: str, epoch: int | None = None, run_id: str = "", query_id: str = "") -> None:
        """Something happened to ``job`` (e.g. the listener reported ``epoch``
        committed by query run ``run_id`` of query ``query_id``): look now."""
        if epoch is not None:
            with self._lock:
                pending = self._reports.setdefault(job, [])
                if len(pending) < 1000:
                    pending.append((epoch, run_id, query_id))
        self._retry_at.pop(job, None)
        self._next_look.pop(job, None)
        self._idle_interval.pop(job, None)
        self._wake.set()

    def call_soon(self, call: Callable[[], None]) -> None:
        """Run ``call`` on the ingest thread before its next pass (never during a job's step),
        in the order given. Exceptions are logged."""
        with self._lock:
            self._calls.append(call)
        self._wake.set()

    def followed(self, job: str) -> JobFollower | None:
        """The follower of ``job`` (None: not followed)."""
        with self._lock:
            return self._followers.get(job)

    def failing(self, job: str) -> str | None:
        """Why ingest of ``job`` is stuck on an epoch right now (None: it is not)."""
        follower = self.followed(job)
        failure = self._failures.get(job)
        if follower is None or failure is None:
            return None
        return follower.entry.problems.get(failure[0], "ingest keeps failing")

    # -- control of one job (ingest thread only: from a call_soon call) -----------------

    def unfollow(self, job: str) -> JobEntry | None:
        """Stop following ``job`` (its store data stays); its entry, None if not followed."""
        with self._lock:
            follower = self._followers.pop(job, None)
            self._reports.pop(job, None)
        for times in (self._next_look, self._idle_interval, self._retry_at):
            times.pop(job, None)
        self._failures.pop(job, None)
        self._paused.discard(job)
        return None if follower is None else follower.entry

    def pause(self, job: str, paused: bool = True) -> None:
        """Stop (or, ``paused`` False, resume) ingesting ``job``; what it holds is still served."""
        if paused:
            self._paused.add(job)
        else:
            self._paused.discard(job)
            self.poke(job)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the loop (ingest thread) ---------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.passed_at = time.monotonic()
            self._wake.clear()
            self._run_calls()
            busy = False
            with self._lock:
                followers = list(self._followers.values())
            for follower in followers:
                if self._stopping.is_set():
                    return
                busy |= self._step(follower)
                self._note(follower)
            if not busy:
                self._wake.wait(self._until_next_look())

    def _note(self, follower: JobFollower) -> None:
        """Record in the store what readers in other processes cannot learn from it otherwise
        (the newest committed epoch, the epochs being retried), when it changed."""
        entry = follower.entry
        notes = IngestNotes(-1 if entry.committed is None else entry.committed, dict(entry.problems))
        key = (follower.name, entry.descriptor.job_id)
        if self._noted.get(key) == notes:
            return
        try:
            self._store.note(entry.descriptor, notes)
        except EpochStateError as error:  # the store is damaged or closing: reads say so
            log.warning("job %s: cannot record its ingest notes: %s", follower.name, error)
            return
        self._noted[key] = notes

    def _run_calls(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for call in calls:
            try:
                call()
            except Exception:
                log.exception("a control call on the ingest thread failed")

    def _until_next_look(self) -> float:
        now = time.monotonic()
        with self._lock:
            names = list(self._followers)
        looks = [max(self._next_look.get(n, now), self._retry_at.get(n, now)) for n in names]
        return max(0.0, min((t - now for t in looks), default=self._poll_interval))

    def _idle(self, follower: JobFollower) -> None:
        job = follower.name
        cap = self._poll_interval if follower.checkpoint.root.is_local else self._poll_max_interval
        interval = self._idle_interval.get(job)
        interval = self._poll_interval if interval is None else min(cap, interval * 2)
        self._idle_interval[job] = interval
        self._next_look[job] = time.monotonic() + interval

    def _look_only(self, follower: JobFollower) -> None:
        """A paused job: only note what its checkpoint committed (its lag), ingest nothing."""
        try:
            follower.next_epoch()
        except Exception as error:
            log.debug("job %s (paused): cannot list its commits: %r", follower.name, error)
        self._idle(follower)

    def _step(self, follower: JobFollower) -> bool:
        now = time.monotonic()
        if now < self._retry_at.get(follower.name, 0.0) or now < self._next_look.get(follower.name, 0.0):
            return False
        if follower.name in self._paused:
            self._look_only(follower)
            return False
        epoch = None
        with self._lock:
            reports = self._reports.pop(follower.name, [])
        for report in reports:
            follower.reported(*report)
        try:
            epoch = follower.next_epoch()
            if epoch is None and not follower.log_went_back():
                self._idle(follower)
                if self._on_caught_up is not None:
                    self._on_caught_up(follower.name)
                return False
            # About to ingest (or the log went back): is it still the same query?
            if follower.may_be_recreated() and follower.reopen_if_recreated():
                self._catalog.put(follower.entry)
                self._publisher.job_followed(follower.entry)
                epoch = follower.next_epoch()
            stats = follower.step(epoch)
        except UNREADABLE as error:
            reason = f"{type(error).__name__}: {error}"
            stats = None if epoch is None else self._failed(follower, epoch, reason)
            if stats is None:
                self._retry_at[follower.name] = time.monotonic() + self._retry_interval
                return False
        except StorageUnavailable as error:
            log.warning("job %s: %s; retrying in %.0fs", follower.name, error, self._retry_interval)
            self._retry_at[follower.name] = time.monotonic() + self._retry_interval
            return False
        except Exception:
            log.exception("job %s: ingest failed; retrying in %.0fs", follower.name, self._retry_interval)
            self._retry_at[follower.name] = time.monotonic() + self._retry_interval
            return False
        if stats is None:
            self._idle(follower)
            return False
        self._failures.pop(follower.name, None)
        self._idle_interval.pop(follower.name, None)
        self._next_look.pop(follower.name, None)
        self._catalog.advance(follower.name, follower.progress)
        log.info(
            "job %s: epoch %d queryable (%d versions%s, %.3f s)",
            follower.name,
            stats.epoch,
            stats.versions_written,
            ", full load" if stats.full_load else "",
            stats.seconds,
        )
        if self._on_ingested is not None:
            self._on_ingested(follower.name, stats)
        return True

    def _failed(self, follower: JobFollower, epoch: int, reason: str) -> IngestStats | None:
        """Record that ``epoch`` failed; after enough attempts, try to skip past it.

        Damage does not mend itself, but a file may be read while being repaired, so
        an epoch is given up only after ``skip_after_failures`` failed attempts.
        """
        if follower.entry.problems.get(epoch) != reason:
            log.error("job %s: epoch %s cannot be ingested: %s", follower.name, epoch, reason)
            follower.entry.set_problem(epoch, reason)
            if self._on_problem is not None:
                self._on_problem(follower.name, epoch, reason)
        failed_epoch, attempts = self._failures.get(follower.name, (epoch, 0))
        attempts = attempts + 1 if failed_epoch == epoch else 1
        self._failures[follower.name] = (epoch, attempts)
        if attempts < self._skip_after:
            return None
        try:
            stats = follower.skip_ahead(epoch, reason)
        except UNREADABLE as error:
            log.warning("job %s: cannot skip past epoch %d: %s", follower.name, epoch, error)
            return None
        if stats is not None:
            log.error(
                "job %s: epochs %s are unavailable for good; serving on from epoch %d",
                follower.name,
                ", ".join(map(str, stats.skipped)),
                stats.epoch,
            )
        return stats
