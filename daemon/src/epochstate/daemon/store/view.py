"""Reads of the multi-version store at one instant: :class:`StoreView`.

A view is a RocksDB snapshot, so retention running concurrently can never make a
read see a half-reclaimed epoch: the view's progress marker and its data come
from the same instant. A read at epoch ``e`` returns the newest version ``<= e``
of a key; a tombstone there means "absent". A read RocksDB fails raises
StoreDamaged (:mod:`damage`), never "absent".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from rocksdict import Rdict, RdictIter

from epochstate.daemon.store import damage, layout
from epochstate.daemon.store.descriptors import JobProgress

# From this many keys a read seeks them in key order (sorting costs less than it saves).
_SORTED_FROM = 16


class Version(NamedTuple):
    """A live version found by a read."""

    encoded_key: bytes
    payload: bytes


class StoreView:
    """A consistent, read-only view of the store at one instant.

    A view serves one read on one thread: its point reads share one iterator.
    """

    def __init__(self, db: Rdict) -> None:
        self._snapshot = db.snapshot()
        # One iterator serves every point read of the view (a read is a progress check
        # and a batch of seeks): creating one per call was a measurable part of a Get.
        self._it = self._snapshot.iter()
        # A snapshot never changes, so neither does a job's progress in it; a view
        # reused by many reads (store/view_pool.py) reads each job's marker once.
        self._progress: dict[int, JobProgress] = {}

    def iterator(self) -> RdictIter:
        """A new iterator over the view's snapshot (for reads that walk many keys)."""
        return self._snapshot.iter()

    def progress(self, job_id: int) -> JobProgress:
        known = self._progress.get(job_id)
        if known is not None:
            return known
        wanted = layout.progress_key(job_id)
        it = self._it
        it.seek(wanted)
        if not it.valid():
            damage.ended(it, f"progress of job id {job_id}")
            progress = JobProgress(-1, -1)
        elif it.key() != wanted:
            progress = JobProgress(-1, -1)
        else:
            progress = JobProgress(*layout.unpack_progress(it.value()))
        self._progress[job_id] = progress
        return progress

    def dropped(self, job_id: int) -> bool:
        """Whether the job with ``job_id`` was dropped (its checkpoint holds another query now)."""
        wanted = layout.dropped_key(job_id)
        it = self._it
        it.seek(wanted)
        if not it.valid():
            damage.ended(it, f"the dropped record of job id {job_id}")
            return False
        return bool(it.key() == wanted)

    def get_many(self, store_id: int, encoded_keys: Sequence[bytes], epoch: int) -> list[Version | None]:
        """The version of each key visible at ``epoch`` (None: absent)."""
        found = self.payloads(store_id, encoded_keys, epoch)
        return [None if p is None else Version(k, p) for k, p in zip(encoded_keys, found, strict=True)]

    def payloads(self, store_id: int, encoded_keys: Iterable[bytes], epoch: int) -> list[bytes | None]:
        """The payload of each key visible at ``epoch`` (None: absent). The read hot path.

        One seek per key; the calls into RocksDB per key are kept to three (seek, key,
        value) because each costs as much as the seek. Many keys are sought in key
        order: each seek then starts near the last one's blocks (a seek costs about a
        third less), and the answers are put back in the caller's order.
        """
        keys = encoded_keys if isinstance(encoded_keys, list) else list(encoded_keys)
        it = self._it
        seek, key, value = it.seek, it.key, it.value
        prefix = layout.data_prefix(store_id)
        suffix = layout.epoch_suffix(epoch)
        width = layout.EPOCH_WIDTH
        tombstone = layout.TOMBSTONE
        found: list[bytes | None] = [None] * len(keys)
        order = (
            range(len(keys)) if len(keys) < _SORTED_FROM else sorted(range(len(keys)), key=keys.__getitem__)
        )
        for index in order:
            head = prefix + keys[index]
            seek(head + suffix)
            # The newest version <= epoch sorts first; it must be of this very key
            # (key() is None past the end of the keyspace).
            raw_key = key()
            if raw_key is not None and raw_key[:-width] == head:
                raw = value()
                if raw[:1] != tombstone:
                    found[index] = raw[1:]
            elif raw_key is None:  # past the end, or RocksDB failed: only status() tells
                damage.ended(it, f"a key of store id {store_id} at epoch {epoch}")
        return found

    def scan(
        self,
        store_id: int,
        epoch: int,
        lower: bytes,
        upper: bytes | None,
        limit: int,
        after: bytes | None = None,
    ) -> list[Version]:
        """Live versions at ``epoch`` of keys in ``[lower, upper)``, in key order.

        ``after`` resumes a previous page: only keys strictly greater than it.
        """
        prefix = layout.data_prefix(store_id)
        start = prefix + lower
        if after is not None and after >= lower:
            start = prefix + after + b"\xff" * layout.EPOCH_WIDTH
        stop = prefix + upper if upper is not None else layout.prefix_end(prefix)
        it = self._snapshot.iter()
        it.seek(start)
        out: list[Version] = []
        skip_user_key = prefix + after if after is not None else None
        while it.valid() and len(out) < limit:
            raw_key = it.key()
            if stop is not None and raw_key >= stop:
                break
            user_key, version_epoch = layout.split_data_key(raw_key)
            if user_key == skip_user_key:
                it.next()
                continue
            if version_epoch > epoch:
                it.seek(layout.data_key(store_id, user_key[len(prefix) :], epoch))
                continue
            payload = layout.parse_version(it.value())
            if payload is not None:
                out.append(Version(user_key[len(prefix) :], payload))
            skip_user_key = user_key
            it.next()
        if not it.valid():
            damage.ended(it, f"a scan of store id {store_id} at epoch {epoch}")
        return out
