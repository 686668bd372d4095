"""Where an epoch's new versions go, and which versions they supersede.

Every new version of a key names the version it supersedes in the epoch's garbage
index (retention deletes it once no retained epoch can see it). The placer finds
that version in the store's :class:`NewestVersions` (the writer's memory of each
key's newest live version) and only for keys it does not know with a RocksDB
seek; it writes each store's versions in key order, which RocksDB inserts about
twice as fast as random order.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from rocksdict import Rdict, WriteBatch

from epochstate.daemon.store import damage, layout
from epochstate.daemon.store.newest import Digest, KeyDigest, NewestVersions, key_digest

StoreChanges = dict[bytes, bytes | None]
"""One store's changes in an epoch: each changed key (its :mod:`keycodec` encoding)
once, with its new payload, or ``None`` when it was removed."""


class Placed(NamedTuple):
    """One store's part of an epoch's batch: the keys given a live version and a
    tombstone, to record in ``newest`` once the batch is written."""

    newest: NewestVersions
    live: list[bytes]
    removed: list[bytes]
    digests: dict[bytes, Digest] | None = None  # the keys' digests, when computed already
    fresh: bool = False  # the store's first versions: ``live`` is all it holds

    def settle(self, epoch: int) -> None:
        """The batch is written: remember where these keys' newest versions are."""
        if self.fresh:
            self.newest.load_keys(self.live, epoch)
            return
        of = self.newest.digest if self.digests is None else self.digests.__getitem__
        self.newest.written(map(of, self.live), map(of, self.removed), epoch)


class VersionPlacer:
    """Places the versions of the stores of one RocksDB (``db`` gives it, raising
    once the store is closed); ``capacity``: keys remembered per store; ``key_hash``:
    how they are remembered (:func:`newest.key_digest`)."""

    def __init__(self, db: Callable[[], Rdict], capacity: int, key_hash: KeyDigest = key_digest) -> None:
        self._db = db
        self._capacity = capacity
        self._key_hash = key_hash
        self._newest: dict[int, NewestVersions] = {}

    def _empty(self, complete: bool) -> NewestVersions:
        return NewestVersions(self._capacity, complete, self._key_hash)

    def new_store(self, store_id: int) -> None:
        """A store id without versions (a dropped job's are deleted with it)."""
        self._newest[store_id] = self._empty(True)

    def forget_store(self, store_id: int) -> None:
        self._newest.pop(store_id, None)

    def place_fresh(self, batch: WriteBatch, store_id: int, changes: StoreChanges, epoch: int) -> Placed:
        """A store's first versions (its job has none yet): nothing to supersede."""
        prefix, suffix, live_marker = layout.data_prefix(store_id), layout.epoch_suffix(epoch), layout.LIVE
        live = sorted(k for k, p in changes.items() if p is not None)
        values = [live_marker + p for p in map(changes.__getitem__, live) if p is not None]
        deque(map(batch.put, [prefix + k + suffix for k in live], values), 0)
        newest = self._newest[store_id] = self._empty(True)
        return Placed(newest, live, [], fresh=True)

    def place(
        self, batch: WriteBatch, store_id: int, changes: StoreChanges, epoch: int, garbage: list[bytes]
    ) -> Placed:
        """New versions of a store's keys; appends to ``garbage`` the data keys of the
        versions they supersede and of new tombstones (removing an absent key writes
        nothing).

        The superseded version is found in the store's :class:`NewestVersions`, or
        for a key it does not know with one seek (sorted, so the seeks move forward
        through the keyspace).
        """
        newest = self._newest_versions(store_id)
        prefix, suffix = layout.data_prefix(store_id), layout.epoch_suffix(epoch)
        # In key order: RocksDB inserts a sorted batch about twice as fast.
        ordered = sorted(changes)
        digests = list(map(newest.digest, ordered))
        digest_of = dict(zip(ordered, digests, strict=True))
        epochs = newest.lookup(digests)
        suffixes = {e: layout.epoch_suffix(e) for e in set(epochs) if e is not None}
        previous = [None if e is None else suffixes[e] for e in epochs]
        payloads = list(map(changes.__getitem__, ordered))
        unknown: list[bytes] = []
        if not newest.complete and None in previous:
            kept = [i for i, p in enumerate(previous) if p is not None]
            unknown = [k for k, p in zip(ordered, previous, strict=True) if p is None]
            ordered = [ordered[i] for i in kept]
            previous = [previous[i] for i in kept]
            payloads = [payloads[i] for i in kept]
        live: list[bytes] = []
        removed: list[bytes] = []
        heads = [prefix + k for k in ordered]
        if None not in payloads:
            # Only new live versions (the usual epoch): whole lists at a time.
            deque(
                map(
                    batch.put,
                    [h + suffix for h in heads],
                    [layout.LIVE + p for p in payloads if p is not None],
                ),
                0,
            )
            # Readers at epochs before `epoch` still need the superseded; none after.
            garbage += [h + p for h, p in zip(heads, previous, strict=True) if p is not None]
            live += ordered
        else:
            self._put_known(batch, suffix, ordered, heads, previous, payloads, garbage, live, removed)
        if unknown:
            self._put_unknown(batch, store_id, prefix, suffix, changes, unknown, garbage, live, removed)
        return Placed(newest, live, removed, digest_of)

    @staticmethod
    def _put_known(
        batch: WriteBatch,
        suffix: bytes,
        ordered: list[bytes],
        heads: list[bytes],
        previous: list[bytes | None],
        payloads: list[bytes | None],
        garbage: list[bytes],
        live: list[bytes],
        removed: list[bytes],
    ) -> None:
        """:meth:`place` of an epoch with removals, for keys whose newest
        version is known (``previous``: its suffix, ``None``: absent)."""
        put, superseded = batch.put, garbage.append
        for encoded_key, head, before, payload in zip(ordered, heads, previous, payloads, strict=True):
            if payload is None:
                if before is None:
                    continue  # removing an absent key changes nothing
                key = head + suffix
                put(key, layout.TOMBSTONE)
                superseded(key)
                removed.append(encoded_key)
            else:
                put(head + suffix, layout.LIVE + payload)
                live.append(encoded_key)
            if before is not None:
                superseded(head + before)

    def _put_unknown(
        self,
        batch: WriteBatch,
        store_id: int,
        prefix: bytes,
        suffix: bytes,
        changes: StoreChanges,
        encoded_keys: list[bytes],
        garbage: list[bytes],
        live: list[bytes],
        removed: list[bytes],
    ) -> None:
        """:meth:`place` for keys whose newest version must be looked up."""
        it = self._db().iter()
        seek, found_key, found_value = it.seek, it.key, it.value
        live_marker, tombstone = layout.LIVE, layout.TOMBSTONE
        put = batch.put
        superseded = garbage.append
        for encoded_key in encoded_keys:
            payload = changes[encoded_key]
            head = prefix + encoded_key
            key = head + suffix
            seek(key)  # the newest version older than `epoch` sorts right after
            # key() is None past the end of the keyspace, or when RocksDB failed.
            previous = found_key()
            if previous is None:
                damage.ended(it, f"the newest version of a key of store id {store_id}")
            elif len(previous) != len(key) or not previous.startswith(head):
                previous = None
            if payload is None:
                if previous is None or not found_value().startswith(live_marker):
                    continue  # removing an absent key changes nothing
                put(key, tombstone)
                superseded(key)
                removed.append(encoded_key)
            else:
                put(key, live_marker + payload)
                live.append(encoded_key)
            if previous is not None:
                superseded(previous)

    def _newest_versions(self, store_id: int) -> NewestVersions:
        known = self._newest.get(store_id)
        if known is None:
            known = self._newest[store_id] = self._learn_newest(store_id)
        return known

    def _learn_newest(self, store_id: int) -> NewestVersions:
        """The newest live version of each key of a store written before this process
        opened it: one pass over its versions, given up (keys then learnt as they
        change) when the store has more keys than the map may hold.

        Only a pass that reached the end of the store's versions makes the map
        complete: an iteration RocksDB stopped raises StoreDamaged (a map taken for
        complete while missing keys would make later changes of them seek nothing)."""
        capacity, key_hash = self._capacity, self._key_hash
        known = self._empty(False)
        prefix = layout.data_prefix(store_id)
        width, live_marker, start = layout.EPOCH_WIDTH, layout.LIVE, len(prefix)
        # 24 bytes a key while learning (a list of the digests would take 52).
        high, low, suffixes = array("Q"), array("Q"), array("Q")
        low_half = (1 << 64) - 1
        current: bytes | None = None
        it = self._db().iter()
        it.seek(prefix)
        key, value, step, valid = it.key, it.value, it.next, it.valid
        to_int = int.from_bytes
        while valid():
            raw = key()
            if not raw.startswith(prefix):
                break
            encoded = raw[start:-width]
            if encoded != current:  # the newest version of the next key
                current = encoded
                if value()[:1] == live_marker:
                    digest = key_hash(encoded)
                    high.append(digest >> 64)
                    low.append(digest & low_half)
                    suffixes.append(to_int(raw[-width:], "big"))
                    if len(suffixes) > capacity:
                        return known
            step()
        else:
            damage.ended(it, f"the newest versions of store id {store_id}")
        epochs = layout.epochs_of_suffixes(np.frombuffer(suffixes, np.uint64))
        known.load(np.frombuffer(high, np.uint64), np.frombuffer(low, np.uint64), epochs)
        known.complete = True
        return known
