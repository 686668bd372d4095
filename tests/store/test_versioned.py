"""The multi-version store against an in-memory model, on a real RocksDB."""

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.daemon.codec import keycodec
from epochstate.daemon.store import layout, newest
from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.placement import StoreChanges
from epochstate.daemon.store.versioned import StoreOptions, VersionedStore


def record(epoch: int) -> EpochRecord:
    return EpochRecord(epoch=epoch, committed_at_ms=epoch, ingested_at_ms=epoch, watermark_ms=0)


def test_random_history_matches_model(tmp_path: Path) -> None:
    rng = random.Random(42)
    store = VersionedStore(tmp_path / "db")
    job = store.add_job("j", "/cp", "q", "hdfs")
    sid = store.add_store("j", 0, "agg", "default", 2, "{}", "{}").store_id
    model: dict[int, dict[tuple[Any, ...], tuple[Any, ...]]] = {}
    live: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    keys = [(i, f"k{i % 7}") for i in range(40)]
    for epoch in range(30):
        changes: StoreChanges = {}
        for key in rng.sample(keys, 12):
            if rng.random() < 0.3:
                changes[keycodec.encode_fields(key)] = None
                live.pop(key, None)
            else:
                value = (epoch, rng.random())
                changes[keycodec.encode_fields(key)] = keycodec.encode(value)
                live[key] = value
        store.apply_epoch(job, epoch, {sid: changes}, record(epoch), fresh=epoch == 0)
        model[epoch] = dict(live)
        if epoch % 5 == 4:
            store.apply_retention(job, epoch - 8)

    view = store.view()
    progress = view.progress(job.job_id)
    assert (progress.oldest, progress.newest) == (21, 29)
    for epoch in range(progress.oldest, progress.newest + 1):
        encoded = [keycodec.encode_fields(k) for k in keys]
        found = view.get_many(sid, encoded, epoch)
        got = {key: keycodec.decode(v.payload) for key, v in zip(keys, found, strict=False) if v is not None}
        assert got == model[epoch], epoch
        scanned = view.scan(sid, epoch, b"", None, 1000)
        assert [keycodec.decode_fields(v.encoded_key, 2) for v in scanned] == sorted(
            model[epoch], key=keycodec.encode_fields
        )
    # Paging returns the same records as one big page.
    pages: list[bytes] = []
    after = None
    while True:
        page = view.scan(sid, 25, b"", None, 3, after)
        if not page:
            break
        pages.extend(v.encoded_key for v in page)
        after = page[-1].encoded_key
    assert pages == [v.encoded_key for v in view.scan(sid, 25, b"", None, 1000)]
    # Retention reclaimed superseded versions: nothing older than needed is left.
    versions = sum(1 for k in store.db.keys() if isinstance(k, bytes) and k[:1] == b"d")  # noqa: SIM118
    assert versions < 30 * 12
    store.close()


def test_apply_is_idempotent_and_atomic_marker(tmp_path: Path) -> None:
    store = VersionedStore(tmp_path / "db")
    job = store.add_job("j", "/cp", "q", "hdfs")
    sid = store.add_store("j", 0, "agg", "default", 1, "{}", "{}").store_id
    key = keycodec.encode_fields((1,))
    store.apply_epoch(job, 0, {sid: {key: b"ten"}}, record(0), fresh=True)
    result = store.apply_epoch(job, 0, {sid: {key: b"other"}}, record(0))
    assert result.versions_written == 0
    view = store.view()
    (version,) = view.get_many(sid, [keycodec.encode_fields((1,))], 0)
    assert version is not None and version.payload == b"ten"
    assert [r.epoch for r in store.epochs(job.job_id)] == [0]
    del view, version  # a live snapshot keeps the database open
    store.close()
    reopened = VersionedStore(tmp_path / "db")
    assert reopened.progress(job.job_id).newest == 0
    reopened.close()


def test_payloads_answer_in_the_callers_order_repeats_included(tmp_path: Path) -> None:
    store = VersionedStore(tmp_path / "db")
    job = store.add_job("j", "/cp", "q", "hdfs")
    sid = store.add_store("j", 0, "agg", "default", 1, "{}", "{}").store_id
    key = [keycodec.encode_fields((i,)) for i in range(30)]
    store.apply_epoch(job, 0, {sid: {k: b"%d" % i for i, k in enumerate(key[:20])}}, record(0), fresh=True)
    store.apply_epoch(job, 1, {sid: {key[3]: None, key[4]: b"new"}}, record(1))
    view = store.view()
    # Fewer keys than sorting pays for, then many: absent, removed and repeated keys.
    few = [key[4], key[25], key[3], key[4], key[0]]
    assert view.payloads(sid, few, 1) == [b"new", None, None, b"new", b"0"]
    assert view.payloads(sid, few, 0) == [b"4", None, b"3", b"4", b"0"]
    many = [key[i] for i in (29, 4, 4, 3, 0, 19, 20, 7, 7, 1, 2, 5, 6, 8, 9, 10, 11, 12, 28, 4)]
    expected = {3: None, 4: b"new"} | {i: b"%d" % i if i < 20 else None for i in range(30) if i not in (3, 4)}
    assert view.payloads(sid, iter(many), 1) == [expected[keycodec.decode_fields(k, 1)[0]] for k in many]
    del view
    store.close()


def _versions(store: VersionedStore, sid: int) -> set[tuple[bytes, int]]:
    """Every (encoded key, epoch) version the store holds for ``sid``."""
    prefix = layout.data_prefix(sid)
    out = set()
    for raw in store.db.keys(from_key=prefix):
        assert isinstance(raw, bytes)
        if not raw.startswith(prefix):
            break
        user_key, epoch = layout.split_data_key(raw)
        out.add((user_key[len(prefix) :], epoch))
    return out


def _colliding(encoded_key: bytes) -> int:
    """Digests whose high halves take 3 values: most keys share theirs with others."""
    return ((hash(encoded_key) % 3) << 64) | (hash(encoded_key) & ((1 << 64) - 1))


@pytest.mark.parametrize(
    ("capacity", "reopen_at", "key_hash"),
    [
        (1_000_000, (), newest.key_digest),
        (6, (), newest.key_digest),
        (1_000_000, (9, 17), newest.key_digest),
        (6, (9, 17), newest.key_digest),
        (1_000_000, (), _colliding),
        (1_000_000, (9, 17), _colliding),
    ],
    ids=["remembered", "evicting", "reopened", "reopened-evicting", "colliding", "colliding-reopened"],
)
@pytest.mark.parametrize("merge_at", [4, 1 << 16], ids=["merged", "recent"])
def test_superseded_versions_found_with_or_without_the_writers_memory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capacity: int,
    reopen_at: tuple[int, ...],
    key_hash: Callable[[bytes], int],
    merge_at: int,
) -> None:
    """Whether the writer remembers a key's newest version (newest.py: in its recent
    changes or merged into its arrays), learns it on reopening, forgets it when its
    memory is full or seeks it: retention leaves exactly the versions some retained
    epoch sees, and every read matches the model, also when the digests' high
    halves (the arrays' sort key) are shared by many keys."""
    monkeypatch.setattr(newest, "_MERGE_AT", merge_at)
    rng = random.Random(7)
    options = StoreOptions(newest_keys_per_store=capacity)
    store = VersionedStore(tmp_path / "db", options, key_hash=key_hash)
    job = store.add_job("j", "/cp", "q", "hdfs")
    sid = store.add_store("j", 0, "agg", "default", 1, "{}", "{}").store_id
    keys = [keycodec.encode_fields((i,)) for i in range(40)]
    history: dict[bytes, dict[int, bytes | None]] = {k: {} for k in keys}  # what was written, per epoch
    floor = 0
    for epoch in range(26):
        if epoch in reopen_at:
            store.close()
            store = VersionedStore(tmp_path / "db", options, key_hash=key_hash)
        changes: StoreChanges = {}
        for key in rng.sample(keys, 40 if epoch == 0 else 10):
            changes[key] = None if epoch and rng.random() < 0.3 else b"%d" % epoch
        store.apply_epoch(job, epoch, {sid: changes}, record(epoch), fresh=epoch == 0)
        for key, payload in changes.items():
            earlier = [e for e in history[key] if e < epoch]
            if payload is not None or (earlier and history[key][max(earlier)] is not None):
                history[key][epoch] = payload  # a removal of an absent key writes nothing
        if epoch % 3 == 2:
            floor = max(0, epoch - 4)
            store.apply_retention(job, floor)

        def visible(key: bytes, at: int) -> int | None:
            older = [e for e in history[key] if e <= at]
            return max(older) if older else None

        expected: set[tuple[bytes, int]] = set()
        for key, written in history.items():
            expected.update((key, e) for e in written if e > floor)
            kept = visible(key, floor)
            if kept is not None and written[kept] is not None:
                expected.add((key, kept))
        assert _versions(store, sid) == expected, epoch
        view = store.view()
        for at in range(floor, epoch + 1):
            want = [None if (e := visible(k, at)) is None else history[k][e] for k in keys]
            assert view.payloads(sid, keys, at) == want, (epoch, at)
        del view
    store.close()
