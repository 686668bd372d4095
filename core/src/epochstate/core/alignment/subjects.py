"""The subject registry in ZooKeeper: subject epochs written once, sources and their mapping.

Every call waits at most ``timeout`` seconds per ZooKeeper request (and, through
:meth:`~epochstate.core.alignment.requests.SubjectRequests.within`, at most until
a caller's deadline), repeats requests that failed on a lost connection, and
raises :class:`RegistryUnavailable` when ZooKeeper still does not answer,
:class:`AccessDenied` when a znode's ACL refuses the client's identity. Writes
are idempotent: repeating one after a timeout (whose request may have run
anyway) ends in the same state.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from epochstate.core.alignment.errors import EpochWrittenByAnotherQuery, SourceNotFound
from epochstate.core.alignment.layout import DEFAULT_ROOT, SubjectLayout, parse_epoch_name
from epochstate.core.alignment.records import Adopt, Mode, SourceRecord, SubjectEpoch
from epochstate.core.alignment.requests import SubjectRequests, Watch
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.records import decode


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class SubjectRegistry(SubjectRequests):
    """Subjects under ``root`` as one client sees them; safe to share between threads."""

    def __init__(
        self,
        client: KazooClient,
        root: str = DEFAULT_ROOT,
        *,
        timeout: float = 5.0,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        super().__init__(client, timeout)
        self.layout = SubjectLayout(root)
        self._clock = clock

    # Epochs.

    def register_epoch(self, epoch: SubjectEpoch) -> bool:
        """Create the znode of ``epoch``; False if it existed already with other ranges.

        A subject epoch is written once: when the znode exists (the writing query
        re-executed the batch after a failure, and its new rows lie outside the
        registered ranges), it is left as it is and False is returned. True means
        the registered ranges are ``epoch.ranges``.

        Raises:
            EpochWrittenByAnotherQuery: the existing epoch names another query (or,
                without query ids, another writer).
        """
        path = self.layout.epoch(epoch.topic, epoch.epoch)
        data = epoch.encode()
        self._ensure(self.layout.epochs(epoch.topic))
        self._ensure(self.layout.sources(epoch.topic))

        def create() -> bool:
            try:
                self._wait(self.client.create_async(path, data))
                return True
            except NodeExistsError:
                existing_data, _ = self._wait(self.client.get_async(path))
            existing = SubjectEpoch.decode(epoch.topic, epoch.epoch, existing_data)
            if not _same_writer(existing, epoch):
                raise EpochWrittenByAnotherQuery(
                    f"epoch {epoch.epoch} of subject {epoch.topic!r} was written by query "
                    f"{existing.query_id} (job {existing.writer!r}), not by query {epoch.query_id} "
                    f"(job {epoch.writer!r}); a new query must write to a topic of its own"
                )
            return existing.ranges == epoch.ranges

        return self._call(create)

    def get_epoch(self, topic: str, epoch: int, watch: Watch | None = None) -> SubjectEpoch | None:
        """Subject epoch ``epoch`` of ``topic``, None if it is not registered.

        With ``watch``, ZooKeeper calls it once when the znode is created (or
        changes or goes away); it runs on kazoo's event thread and must not block.
        """
        data = self._call(lambda: self._read(self.layout.epoch(topic, epoch), watch))
        return None if data is None else SubjectEpoch.decode(topic, epoch, data)

    def epochs(self, topic: str) -> list[int]:
        """The registered epochs of ``topic``, ascending (none for an unknown subject)."""
        names = self._call(lambda: self._children(self.layout.epochs(topic)))
        return sorted(epoch for name in names if (epoch := parse_epoch_name(name)) is not None)

    def delete_epochs(self, topic: str, epochs: Iterable[int]) -> None:
        """Delete the znodes of ``epochs`` of ``topic``, oldest first (retention; gone ones are skipped).

        The requests are pipelined; ZooKeeper runs one session's requests in order,
        so the lowest registered epoch only ever moves up.
        """
        paths = [self.layout.epoch(topic, epoch) for epoch in sorted(epochs)]

        def delete() -> None:
            for request in [self.client.delete_async(path) for path in paths]:
                with contextlib.suppress(NoNodeError):
                    self._wait(request)

        if paths:
            self._call(delete)

    def oldest_retained(self, job: str) -> int | None:
        """The oldest epoch of ``job`` that a live daemon replica retains; None without replicas.

        Reads the daemons' ephemeral ``<root>/jobs/<job>/replicas/<node>`` znodes.
        """
        replicas = Layout(self.layout.root).replicas(job)

        def oldest() -> int | None:
            found = []
            for name in self._children(replicas):
                data = self._read(f"{replicas}/{name}", None)
                record = decode(data)
                if record is not None and isinstance(record.get("oldest_epoch"), int):
                    found.append(record["oldest_epoch"])
            return min(found, default=None)

        return self._call(oldest)

    # Sources.

    def get_source(self, topic: str, job: str, watch: Watch | None = None) -> SourceRecord | None:
        """The record of source ``job`` of ``topic``, None if it never registered.

        With ``watch``, ZooKeeper calls it once when the znode changes (a new
        command) or appears; it runs on kazoo's event thread and must not block.
        """
        data = self._call(lambda: self._read(self.layout.source(topic, job), watch))
        return None if data is None else SourceRecord.decode(topic, job, data)

    def subjects(self) -> list[str]:
        """Every subject with a znode under the root, sorted."""
        return sorted(self._call(lambda: self._children(self.layout.subjects)))

    def sources(self, topic: str) -> list[str]:
        """The jobs that registered as sources of ``topic``, sorted (none for an unknown subject)."""
        return sorted(self._call(lambda: self._children(self.layout.sources(topic))))

    def exists(self, topic: str) -> bool:
        """Whether subject ``topic`` has a znode (an epoch or a source registered once)."""
        path = self.layout.subject(topic)
        return self._call(lambda: self._wait(self.client.exists_async(path)) is not None)

    def register_source(
        self, topic: str, job: str, mode: Mode, query_id: str | None = None, adopt: Adopt | None = None
    ) -> SourceRecord:
        """Create the znode of source ``job`` or set its mode; the rest stays (for query ``query_id``)."""
        return self.update_source(
            topic, job, lambda record: record.with_mode(mode, self._clock()), mode, query_id, adopt
        )

    def record_mapping(
        self,
        topic: str,
        job: str,
        mode: Mode,
        entries: Iterable[tuple[int, int]],
        keep: int,
        query_id: str | None = None,
        adopt: Adopt | None = None,
    ) -> SourceRecord:
        """Add query ``query_id``'s ``(source epoch, subject epoch)`` entries to source ``job``'s mapping.

        Only the ``keep`` newest source epochs are kept; the other fields stay.
        A mapping of another query is replaced in the same compare-and-set.
        """
        added = list(entries)
        return self.update_source(
            topic, job, lambda record: record.with_entries(added, keep, self._clock()), mode, query_id, adopt
        )

    def update_source(
        self,
        topic: str,
        job: str,
        change: Callable[[SourceRecord], SourceRecord],
        create_as: Mode | None = None,
        query_id: str | None = None,
        adopt: Adopt | None = None,
    ) -> SourceRecord:
        """Apply ``change`` to the record of source ``job`` by compare-and-set; the record written.

        ``change`` may run several times (each time on the newest record) when
        others write meanwhile, so fields it does not change stay as they wrote
        them. A missing znode is created from ``SourceRecord(create_as)``, or,
        without ``create_as``, SourceNotFound is raised. Nothing is written when
        ``change`` returns the record unchanged.

        With ``query_id`` (the source's own writes), ``change`` sees the record as
        that query's source must (:meth:`SourceRecord.for_query`): the record of
        another query is replaced by a fresh one in the same compare-and-set, so
        no reader ever sees two queries' batch ids in one mapping.
        """
        path = self.layout.source(topic, job)
        self._ensure(self.layout.sources(topic))

        def update() -> SourceRecord:
            try:
                data, stat = self._wait(self.client.get_async(path))
            except NoNodeError:
                if create_as is None:
                    raise SourceNotFound(f"subject {topic!r} has no source {job!r}") from None
                record = change(SourceRecord(create_as, query_id=query_id))
                try:
                    self._wait(self.client.create_async(path, record.encode()))
                except NodeExistsError:
                    raise ForceRetryError() from None
                return record
            current = SourceRecord.decode(topic, job, data)
            record = change(current.for_query(query_id, self._clock(), adopt))
            if replace(record, updated_at_ms=current.updated_at_ms) == current:
                return current
            try:
                self._wait(self.client.set_async(path, record.encode(), stat.version))
            except (BadVersionError, NoNodeError):
                raise ForceRetryError() from None
            return record

        return self._call(update)


def _same_writer(existing: SubjectEpoch, new: SubjectEpoch) -> bool:
    if existing.query_id is not None and new.query_id is not None:
        return existing.query_id == new.query_id
    return existing.writer == new.writer
