"""The live catalog of followed jobs: what readers may query, and waiting for epochs.

The ingest loop is the only writer; gRPC handlers read. Progress changes are
announced through one condition variable, so a read that waits for an epoch
wakes as soon as it is queryable, and shutdown wakes every waiter at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError
from epochstate.core.sparktypes import StructType, parse_struct
from epochstate.daemon.codec.keycodec import decode_fields
from epochstate.daemon.store.descriptors import JobDescriptor, JobProgress, StoreDescriptor, StoreShape


class CatalogError(EpochStateError):
    """Root of the catalog's errors."""


class JobNotFound(CatalogError):
    reason = reasons.JOB_NOT_FOUND


class StoreNotFound(CatalogError):
    reason = reasons.STORE_NOT_FOUND


class ShuttingDown(CatalogError):
    reason = reasons.SHUTTING_DOWN


class WaitAbandoned(CatalogError):
    """The caller of a waiting read went away (cancelled, disconnected) while it waited."""

    reason = reasons.CALL_CANCELLED


def _never() -> bool:
    return False


@dataclass(frozen=True)
class StoreSchema:
    """A store's shape in force from ``first_epoch`` on, parsed: key and value
    schemas, and the number of Spark partitions its rows are spread over."""

    first_epoch: int
    key: StructType
    value: StructType
    version: StoreShape

    @classmethod
    def of(cls, version: StoreShape) -> StoreSchema:
        return cls(
            version.first_epoch,
            parse_struct(version.key_schema_json),
            parse_struct(version.value_schema_json),
            version,
        )

    @property
    def num_partitions(self) -> int:
        return self.version.num_partitions

    def decode_key(self, encoded: bytes) -> tuple[object, ...]:
        return decode_fields(encoded, len(self.key.fields))


@dataclass(frozen=True)
class StoreHandle:
    """A queryable store with its shapes (oldest first, never empty)."""

    descriptor: StoreDescriptor
    schemas: tuple[StoreSchema, ...]

    @classmethod
    def of(cls, descriptor: StoreDescriptor, versions: list[StoreShape] | None = None) -> StoreHandle:
        found = versions or [descriptor.first_shape]
        return cls(descriptor, tuple(StoreSchema.of(v) for v in found))

    @property
    def latest(self) -> StoreSchema:
        return self.schemas[-1]

    @property
    def key_schema(self) -> StructType:
        """The newest key schema."""
        return self.schemas[-1].key

    @property
    def value_schema(self) -> StructType:
        """The newest value schema."""
        return self.schemas[-1].value

    def schema_at(self, epoch: int) -> StoreSchema:
        """The shape in force at ``epoch``: the schemas its rows were decoded with and
        keys read at it are checked against, and the partitions a key of it falls in."""
        for schema in reversed(self.schemas):
            if schema.first_epoch <= epoch:
                return schema
        return self.schemas[0]

    def check_declared(self, epoch: int) -> None:
        """Refuse a read of the store at ``epoch`` when the query had no such store
        then: before the store's first epoch, or in a shape where it is absent.

        Raises:
            StoreNotFound: so.
        """
        d = self.descriptor
        if epoch >= d.first_epoch and not self.schema_at(epoch).version.absent:
            return
        what = "state variable" if d.kind else "store"
        when = (
            f"it first appears at epoch {d.first_epoch}"
            if epoch < d.first_epoch
            else f"the run of epoch {epoch} no longer declares it"
        )
        raise StoreNotFound(
            f"job {d.job!r}: {what} {d.operator_id}/{d.store_name} is not part of the query at epoch {epoch}"
            f" ({when})",
            metadata={
                "job": d.job,
                "operatorId": str(d.operator_id),
                "store": d.store_name,
                "epoch": str(epoch),
            },
        )

    def layouts(self) -> tuple[tuple[int, int], ...]:
        """(first epoch, number of partitions) of each partition count the store had,
        oldest first."""
        found: list[tuple[int, int]] = []
        for shape in self.schemas:
            if not found or found[-1][1] != shape.num_partitions:
                found.append((shape.first_epoch, shape.num_partitions))
        return tuple(found)

    def with_schema(self, version: StoreShape) -> StoreHandle:
        return StoreHandle(self.descriptor, (*self.schemas, StoreSchema.of(version)))


@dataclass
class JobEntry:
    """Everything a reader needs about one job.

    The ingest thread is the only writer; gRPC threads read. Every field is replaced
    whole, never changed in place: the mappings are read-only snapshots, and a writer
    publishes a new one in one assignment (:meth:`with_problem` and friends). So a
    reader that takes a field once iterates a consistent snapshot while ingest goes
    on, without a lock and without relying on how the interpreter schedules threads.
    """

    descriptor: JobDescriptor
    stores: Mapping[tuple[int, str], StoreHandle] = field(default_factory=dict)
    operator_names: Mapping[int, str] = field(default_factory=dict)
    progress: JobProgress = field(default_factory=lambda: JobProgress(-1, -1))
    # Epochs that could not be ingested, with the reason (shown by DescribeJob): the
    # one ingest is retrying, and those it skipped for good (also in ``unavailable``).
    problems: Mapping[int, str] = field(default_factory=dict)
    # Committed epochs skipped because their state could not be read; never served.
    unavailable: Mapping[int, str] = field(default_factory=dict)
    # Newest epoch seen committed in the checkpoint (-1: none).
    committed: int = -1

    def set_problem(self, epoch: int, reason: str) -> None:
        """Publish ``epoch``'s problem (a new snapshot of :attr:`problems`)."""
        self.problems = {**self.problems, epoch: reason}

    def clear_problems(self, epochs: Iterable[int]) -> None:
        """Publish :attr:`problems` without ``epochs``."""
        gone = set(epochs)
        if gone & self.problems.keys():
            self.problems = {e: r for e, r in self.problems.items() if e not in gone}

    def store(self, operator_id: int, name: str) -> StoreHandle:
        handle = self.stores.get((operator_id, name or "default"))
        if handle is None:
            known = ", ".join(f"{op}/{st}" for op, st in sorted(self.stores)) or "none yet"
            raise StoreNotFound(
                f"job {self.descriptor.name!r} has no store {operator_id}/{name or 'default'}"
                f" (known operator/store: {known})",
                metadata={
                    "job": self.descriptor.name,
                    "operatorId": str(operator_id),
                    "store": name or "default",
                },
            )
        return handle


class Catalog:
    """Followed jobs by name; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._jobs: dict[str, JobEntry] = {}
        self._changed = threading.Condition()
        self._closed = False
        self._clock = clock

    def put(self, entry: JobEntry) -> None:
        with self._changed:
            self._jobs[entry.descriptor.name] = entry
            self._changed.notify_all()

    def remove(self, name: str) -> JobEntry | None:
        """Stop serving ``name`` (reads of it then fail JobNotFound); its entry, if any."""
        with self._changed:
            entry = self._jobs.pop(name, None)
            self._changed.notify_all()
            return entry

    def get(self, name: str) -> JobEntry:
        entry = self._jobs.get(name)
        if entry is None:
            known = ", ".join(sorted(self._jobs)) or "none"
            raise JobNotFound(f"unknown job {name!r} (followed jobs: {known})", metadata={"job": name})
        return entry

    def find(self, name: str) -> JobEntry | None:
        """The entry of job ``name``, or None (where :meth:`get` raises JobNotFound)."""
        return self._jobs.get(name)

    def jobs(self) -> list[JobEntry]:
        return [self._jobs[name] for name in sorted(self._jobs)]

    def advance(self, name: str, progress: JobProgress) -> None:
        """Announce that ``name``'s queryable range is now ``progress``."""
        with self._changed:
            self._jobs[name].progress = progress
            self._changed.notify_all()

    def wait_until(
        self,
        name: str,
        ready: Callable[[JobProgress], bool],
        timeout: float | None,
        abandoned: Callable[[], bool] = _never,
    ) -> JobProgress | None:
        """Wait until ``ready(progress)`` holds; None on timeout.

        ``abandoned`` is asked whenever the wait wakes: whoever makes it true must call
        :meth:`wake`, so that the wait ends at once rather than at its timeout.

        Raises:
            ShuttingDown: the catalog closes while waiting.
            WaitAbandoned: ``abandoned()`` became true.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with self._changed:
            while True:
                if self._closed:
                    raise ShuttingDown("the daemon is shutting down")
                if abandoned():
                    raise WaitAbandoned("the caller went away while the read waited")
                progress = self.get(name).progress
                if ready(progress):
                    return progress
                remaining = None if deadline is None else deadline - self._clock()
                if remaining is not None and remaining <= 0:
                    return None
                self._changed.wait(remaining)

    def subscribe_wait(self, timeout: float) -> None:
        """Block until any change (or ``timeout``); for streaming watchers."""
        with self._changed:
            if self._closed:
                raise ShuttingDown("the daemon is shutting down")
            self._changed.wait(timeout)

    def wake(self) -> None:
        """Wake every wait, to look again at what it waits for (and whether it is abandoned)."""
        with self._changed:
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
