"""Where each key's newest live version is, remembered by the writer.

Writing a version of a key must name the version it supersedes (retention's
garbage index): without help that is one RocksDB seek per changed key, about a
third of an incremental epoch's ingest. The writer is the only one who adds
versions, so it can remember instead: :class:`NewestVersions` maps a store's
encoded keys to the epoch suffix (:func:`layout.epoch_suffix`) of their newest
*live* version.

Guarantees:

* A key it knows maps to the suffix of the key's newest version, and that version
  is live. The caller updates it only after the epoch's batch is written, so a
  failed write leaves it as it was.
* While :attr:`complete` holds, every key of the store with a live newest version
  is known, so an unknown key is absent (no version, or a tombstone newest).
  Otherwise an unknown key must be looked up in the store.
* Memory is bounded: at most ``capacity`` keys (about 100 bytes each); when it
  fills up it is emptied (and no longer complete), then learns again as keys change.

Retention never removes a newest live version, so it never makes an entry wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import repeat


class NewestVersions:
    """Encoded key -> epoch suffix of its newest live version, for one store."""

    __slots__ = ("_capacity", "_known", "complete")

    def __init__(self, capacity: int, complete: bool) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self._capacity = capacity
        self._known: dict[bytes, bytes] = {}
        self.complete = complete
        """Every live key is known: an unknown key is absent."""

    @property
    def get(self) -> Callable[[bytes], bytes | None]:
        """``get(encoded_key)``: the epoch suffix of the key's newest live version;
        ``None``: unknown (absent, when :attr:`complete`). A bound C method, so
        ``map(newest.get, keys)`` runs without a Python call per key."""
        return self._known.get

    def written(self, live: Iterable[bytes], removed: Iterable[bytes], suffix: bytes) -> None:
        """Record an epoch's written batch: ``live`` keys now have their newest
        version at ``suffix``, ``removed`` keys a tombstone."""
        known = self._known
        drop = known.pop
        for encoded_key in removed:
            drop(encoded_key, None)
        known.update(zip(live, repeat(suffix)))
        if len(known) > self._capacity:
            known.clear()
            self.complete = False
