"""Reads over a range of epochs: one key's versions, and the keys each epoch changed.

The store keeps one version per (store, key, epoch) a key changed at (a tombstone
for a removal), newest first under each key (:mod:`layout`). So a key's history is
one seek and a walk over its versions, and the changes of epoch ``e`` are the
versions written at ``e``, found through the epoch's change index (the keys it
changed, written in the epoch's batch). Both read one :class:`StoreView`, so
retention running concurrently never shows them a half-reclaimed range.

What an epoch's versions mean depends on the state before it being retained: the
versions of the first epoch a daemon ingested hold its whole state (a full load),
not its changes. :func:`first_changes_epoch` says from which epoch on the changes
are known. Retention keeps every version visible at the oldest retained epoch and
all newer ones, so within the queryable range nothing these reads need is missing:
a tombstone after the oldest retained epoch, and the version it superseded, stay.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from epochstate.daemon.store import damage, layout
from epochstate.daemon.store.descriptors import JobProgress
from epochstate.daemon.store.errors import StoreDamaged
from epochstate.daemon.store.view import StoreView


class StoredVersion(NamedTuple):
    """A version of a key: the epoch it was written at, its payload (None: a tombstone)."""

    epoch: int
    payload: bytes | None


class ChangedKey(NamedTuple):
    """A key an epoch changed: its new payload (None: removed) and, for a removal, the
    payload of the version it removed (None for an upsert, or when there was none)."""

    encoded_key: bytes
    payload: bytes | None
    before: bytes | None


def first_changes_epoch(progress: JobProgress) -> int:
    """The oldest epoch whose changes the store knows: the one after the oldest retained
    (whose versions may be a full load), or 0 when epoch 0 is retained (the state
    before the first batch is empty). -1 when nothing is queryable."""
    if progress.empty:
        return -1
    return 0 if progress.oldest == 0 else progress.oldest + 1


def versions(view: StoreView, store_id: int, encoded_key: bytes, newest: int) -> Iterator[StoredVersion]:
    """The versions of one key written at or before epoch ``newest``, newest first."""
    head = layout.data_prefix(store_id) + encoded_key
    width = layout.EPOCH_WIDTH
    it = view.iterator()
    it.seek(head + layout.epoch_suffix(newest))
    while it.valid():
        raw = it.key()
        if raw[:-width] != head:
            return
        yield StoredVersion(layout.split_data_key(raw)[1], layout.parse_version(it.value()))
        it.next()
    damage.ended(it, f"the versions of a key of store id {store_id}")


def changes(view: StoreView, store_id: int, first: int, last: int) -> dict[int, list[ChangedKey]]:
    """The keys each epoch of ``[first, last]`` changed, per epoch, in key order."""
    return dict(changes_by_epoch(view, store_id, first, last))


def changes_by_epoch(
    view: StoreView, store_id: int, first: int, last: int
) -> Iterator[tuple[int, list[ChangedKey]]]:
    """:func:`changes`, epoch by epoch in epoch order, each as soon as it is read (a caller
    streaming them sends one epoch while the next is read).

    An epoch with a change index (:func:`layout.changed_key`) costs a seek per changed
    key; a run of epochs without one (a full load at epoch 0, whose changes are the
    whole state, or epochs written by a daemon before the index) is read by one walk
    over the store's versions, whose cost grows with the store.
    """
    missing: list[int] = []
    for epoch in range(first, last + 1):
        found = _indexed(view, store_id, epoch)
        if found is None:
            missing.append(epoch)
            continue
        if missing:
            yield from _walked(view, store_id, missing)
            missing = []
        yield epoch, found
    if missing:
        yield from _walked(view, store_id, missing)


def _walked(view: StoreView, store_id: int, epochs: list[int]) -> Iterator[tuple[int, list[ChangedKey]]]:
    found = walk(view, store_id, epochs[0], epochs[-1])
    return ((e, found[e]) for e in epochs)


def _indexed(view: StoreView, store_id: int, epoch: int) -> list[ChangedKey] | None:
    """The keys ``epoch`` changed, by its change index (None: the epoch has none)."""
    prefix = layout.changed_prefix(store_id, epoch)
    it = view.iterator()
    it.seek(prefix)
    keys: list[bytes] = []
    indexed = False
    while it.valid() and it.key().startswith(prefix):
        keys += layout.unpack_keys(it.value())
        indexed = True
        it.next()
    if not it.valid():
        damage.ended(it, f"the change index of store id {store_id} at epoch {epoch}")
    if not indexed:
        return None
    head, suffix, width = layout.data_prefix(store_id), layout.epoch_suffix(epoch), layout.EPOCH_WIDTH
    seek, key, value, step = it.seek, it.key, it.value, it.next
    tombstone = layout.TOMBSTONE
    out: list[ChangedKey] = []
    append = out.append
    # ChangedKey(...) runs a Python function per key; tuple's own constructor does not.
    changed = tuple.__new__
    # Three calls into RocksDB per upsert (each costs about as much as the seek); a
    # removal reads the version it superseded too (the partition the key was in).
    for encoded in keys:
        wanted = head + encoded + suffix
        seek(wanted)
        if key() != wanted:
            damage.ended(it, f"a version of store id {store_id} at epoch {epoch}")
            raise StoreDamaged(
                f"the change index of store id {store_id} names a version at epoch {epoch} that is not there"
            )
        raw = value()
        if raw[:1] != tombstone:
            append(changed(ChangedKey, (encoded, raw[1:], None)))
            continue
        step()
        older = key()
        if older is None:
            damage.ended(it, f"the versions of a key of store id {store_id}")
        same_key = older is not None and older[:-width] == wanted[:-width]
        append(ChangedKey(encoded, None, layout.parse_version(value()) if same_key else None))
    return out


def walk(view: StoreView, store_id: int, first: int, last: int) -> dict[int, list[ChangedKey]]:
    """:func:`changes` by one walk over every version of the store (no index read)."""
    prefix = layout.data_prefix(store_id)
    stop = layout.prefix_end(prefix)
    out: dict[int, list[ChangedKey]] = {e: [] for e in range(first, last + 1)}
    it = view.iterator()
    it.seek(prefix)
    # The changed versions of the key being walked, newest first, waiting for the
    # version each superseded (the next one under the same key).
    pending: list[tuple[int, bytes | None]] = []
    current = b""
    while it.valid():
        raw = it.key()
        if stop is not None and raw >= stop:
            break
        user_key, epoch = layout.split_data_key(raw)
        if user_key != current:
            _settle(out, current[len(prefix) :], pending, None)
            current = user_key
        if epoch > last:
            it.next()
            continue
        payload = layout.parse_version(it.value())
        if pending:
            _settle(out, user_key[len(prefix) :], pending, payload)
        if epoch >= first:
            pending.append((epoch, payload))
        it.next()
    if not it.valid():
        damage.ended(it, f"the changes of store id {store_id}")
    _settle(out, current[len(prefix) :], pending, None)
    return out


def _settle(
    out: dict[int, list[ChangedKey]],
    encoded_key: bytes,
    pending: list[tuple[int, bytes | None]],
    before: bytes | None,
) -> None:
    """Record the oldest pending change of ``encoded_key``, which superseded ``before``;
    each newer pending one superseded the one after it. Empties ``pending``."""
    if not pending:
        return
    for (epoch, payload), older in zip(pending, [*(p for _, p in pending[1:]), before], strict=True):
        out[epoch].append(ChangedKey(encoded_key, payload, older if payload is None else None))
    pending.clear()
