"""Where each key's newest live version is, remembered by the writer in ~24 bytes a key.

Writing a version of a key must name the version it supersedes (retention's
garbage index): without help that is one RocksDB seek per changed key, which on a
large state costs more than the rest of an incremental epoch's ingest
(``bench/state_size.py``). The writer is the only one who
adds versions, so it can remember instead: :class:`NewestVersions` maps a store's
keys to the epoch of their newest *live* version.

It remembers a 128-bit digest of each key, not the key: 24 bytes a key in sorted
numpy arrays (plus a dict of the recent changes, merged in now and then),
against about 100 for a dict of the keys themselves, so remembering every key of
a 10M-key state costs ~240 MB instead of ~1 GB.

Guarantees:

* A key the map knows maps to the epoch of its newest version, and that version
  is live, provided no two keys of the store share a digest. The digest is two
  SipHash values (Python's ``hash``, keyed with the process's secret) of
  different inputs: a pair of keys shares it with probability about 2⁻¹²⁸, so
  among 10M keys the chance of any shared digest is about 10⁻²⁵, and inputs
  cannot be chosen to collide without the secret. (A shared digest is not
  harmless: it could make the writer name the wrong superseded version, and a
  version never reclaimed reappears once the tombstone above it is.)
* While :attr:`complete` holds, every key of the store with a live newest version
  is known, so an unknown key is absent. Otherwise it must be looked up in the store.
* The caller records an epoch only after its batch is written, so a failed write
  leaves the map as it was.
* Memory is bounded: at most ``capacity`` keys; when more are recorded the map is
  emptied (and no longer complete), then learns again as keys change.

Retention never removes a newest live version, so it never makes an entry wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import repeat

import numpy as np
import numpy.typing as npt

Digest = int
"""A key's 128-bit digest, as a Python int (a dict key without a tuple)."""
KeyDigest = Callable[[bytes], Digest]

_LOW = (1 << 64) - 1
_REMOVED = -1  # in the recent changes: the key's newest version is a tombstone
_MISSING = -2  # a lookup's "not among the merged keys"
# Recent changes are merged into the sorted arrays once there are this many, or a
# sixteenth of the merged keys (a merge copies the arrays: tens of ms at 10M keys).
_MERGE_AT = 1 << 16


def key_digest(encoded_key: bytes) -> Digest:
    """The 128-bit digest of an encoded key: SipHash of it (cached by the bytes
    object) and of it behind one more byte, keyed with this process's secret."""
    return ((hash(encoded_key) & _LOW) << 64) | (hash(b"\x01" + encoded_key) & _LOW)


def halves(digests: Iterable[Digest], count: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """The high and low 64 bits of each digest."""
    digests = list(digests)
    high = np.fromiter((d >> 64 for d in digests), np.uint64, count)
    low = np.fromiter((d & _LOW for d in digests), np.uint64, count)
    return high, low


class NewestVersions:
    """Key digest -> epoch of the key's newest live version, for one store."""

    __slots__ = ("_capacity", "_epochs", "_fence", "_high", "_low", "_recent", "_shift", "complete", "digest")

    def __init__(self, capacity: int, complete: bool, digest: KeyDigest = key_digest) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self._capacity = capacity
        self.digest = digest
        """How keys are remembered (tests pass digests that collide)."""
        self._recent: dict[Digest, int] = {}  # epoch, or _REMOVED; newer than the arrays
        # Sorted by the digest's high half. The high halves are uniform, so the top
        # bits of one say which of ~n/4 buckets it falls in, and _fence[b] where
        # bucket b starts: a search reads a few neighbouring entries instead of
        # probing the ~23 cache lines of a binary search over millions of keys.
        self._high: npt.NDArray[np.uint64] = np.empty(0, np.uint64)
        self._low: npt.NDArray[np.uint64] = np.empty(0, np.uint64)
        self._epochs: npt.NDArray[np.int64] = np.empty(0, np.int64)
        self._shift = np.uint64(63)
        self._fence: npt.NDArray[np.intp] = np.zeros(3, np.intp)
        self.complete = complete
        """Every live key is known: an unknown key is absent."""

    def __len__(self) -> int:
        """Keys remembered, counting a recent change to a merged key twice (an upper bound)."""
        return len(self._high) + len(self._recent)

    def lookup(self, digests: Sequence[Digest]) -> list[int | None]:
        """The epoch of each key's newest live version; ``None``: unknown (absent
        when :attr:`complete`)."""
        found: list[int | None] = list(map(self._recent.get, digests))
        if len(self._high) and None in found:
            misses = [i for i, epoch in enumerate(found) if epoch is None]
            epochs = self._search(*halves((digests[i] for i in misses), len(misses)))
            for i, epoch in zip(misses, epochs.tolist(), strict=True):
                found[i] = epoch
        return [None if epoch is None or epoch < 0 else epoch for epoch in found]

    def written(self, live: Iterable[Digest], removed: Iterable[Digest], epoch: int) -> None:
        """Record an epoch's written batch: ``live`` keys now have their newest
        version at ``epoch``, ``removed`` keys a tombstone."""
        recent = self._recent
        recent.update(zip(removed, repeat(_REMOVED)))
        recent.update(zip(live, repeat(epoch)))
        if len(self) > self._capacity:
            self._merge()  # recent changes to merged keys no longer count twice
            if len(self) > self._capacity:
                self.clear()
                return
        if len(recent) >= max(_MERGE_AT, len(self._high) >> 4):
            self._merge()

    def load_keys(self, encoded_keys: Sequence[bytes], epoch: int) -> None:
        """Replace what is remembered with ``encoded_keys`` (distinct: a store's first
        versions), each newest at ``epoch``."""
        count = len(encoded_keys)
        if count > self._capacity:
            self.clear()
            return
        if self.digest is key_digest:  # its halves without a Python call per key
            high = np.fromiter(map(hash, encoded_keys), np.int64, count).view(np.uint64)
            low = np.fromiter(map(hash, map(b"\x01".__add__, encoded_keys)), np.int64, count).view(np.uint64)
        else:
            high, low = halves(map(self.digest, encoded_keys), count)
        self.load(high, low, np.full(count, epoch, np.int64))

    def load(
        self, high: npt.NDArray[np.uint64], low: npt.NDArray[np.uint64], epochs: npt.NDArray[np.int64]
    ) -> None:
        """Replace what is remembered with distinct digests (their ``high`` and ``low``
        halves, of every live key, in any order) and their ``epochs``; the caller
        then sets :attr:`complete`."""
        order = np.argsort(high, kind="stable")
        self._high, self._low, self._epochs = high[order], low[order], epochs[order]
        self._recent = {}
        self._index()

    def clear(self) -> None:
        """Forget every key: the map is no longer complete."""
        self._recent = {}
        self._high = np.empty(0, np.uint64)
        self._low = np.empty(0, np.uint64)
        self._epochs = np.empty(0, np.int64)
        self._index()
        self.complete = False

    def _index(self) -> None:
        """The bucket fences of the sorted arrays (after every change to them)."""
        bits = max(1, (len(self._high) >> 2).bit_length())
        self._shift = np.uint64(64 - bits)
        counts = np.bincount((self._high >> self._shift).astype(np.intp), minlength=1 << bits)
        self._fence = np.concatenate((np.zeros(1, np.intp), np.cumsum(counts, dtype=np.intp)))

    def _positions(
        self, high: npt.NDArray[np.uint64], low: npt.NDArray[np.uint64]
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """Per digest: where it goes in the sorted arrays (before every entry with a
        high half as large), and its index there (-1: not there)."""
        bucket = (high >> self._shift).astype(np.intp)
        start, end = self._fence[bucket], self._fence[bucket + 1]
        position = start.copy()
        index = np.full(len(high), -1, np.intp)
        width = int((end - start).max()) if len(high) else 0
        for step in range(width):  # a bucket's entries, all buckets at once
            at = start + step
            inside = at < end
            at = np.where(inside, at, 0)
            entry = self._high[at]
            position += inside & (entry < high)
            found = inside & (entry == high) & (self._low[at] == low)
            index = np.where(found, at, index)
        return position, index

    def _search(self, high: npt.NDArray[np.uint64], low: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        _, index = self._positions(high, low)
        return np.where(index >= 0, self._epochs[index], _MISSING)

    def _merge(self) -> None:
        """Fold the recent changes into the sorted arrays (removed keys leave them):
        one pass over the arrays, no sort of them."""
        recent, self._recent = self._recent, {}
        if not recent:
            return
        high, low = halves(recent.keys(), len(recent))
        epochs = np.fromiter(recent.values(), np.int64, len(recent))
        order = np.argsort(high, kind="stable")
        high, low, epochs = high[order], low[order], epochs[order]
        position, index = self._positions(high, low)
        there = index >= 0
        self._epochs[index[there]] = epochs[there]
        removal = there & (epochs < 0)
        gone = index[removal]
        new = ~there & (epochs >= 0)
        added = position[new] + np.arange(int(new.sum()), dtype=np.intp)  # their places once merged
        kept = np.ones(len(self._high) + len(added), bool)
        kept[added] = False  # where the old entries go: everywhere else, in order
        for name, values in (("_high", high), ("_low", low), ("_epochs", epochs)):
            old = getattr(self, name)
            merged = np.empty(len(kept), old.dtype)
            merged[kept] = old
            merged[added] = values[new]
            setattr(self, name, merged)
        if len(gone):
            removed = np.ones(len(self._high), bool)
            removed[np.nonzero(kept)[0][gone]] = False  # their places once merged
            self._high, self._low, self._epochs = (
                self._high[removed],
                self._low[removed],
                self._epochs[removed],
            )
        self._refence(high[new], high[removal])

    def _refence(self, added: npt.NDArray[np.uint64], removed: npt.NDArray[np.uint64]) -> None:
        """Update the fences for entries ``added`` and ``removed`` (their high halves);
        rebuilt when the arrays outgrew (or shrank below) the buckets' size."""
        buckets = len(self._fence) - 1
        if not buckets // 2 <= max(1, len(self._high) >> 2) < buckets * 2:
            self._index()
            return
        change = np.bincount((added >> self._shift).astype(np.intp), minlength=buckets)
        change -= np.bincount((removed >> self._shift).astype(np.intp), minlength=buckets)
        self._fence[1:] += np.cumsum(change, dtype=np.intp)
