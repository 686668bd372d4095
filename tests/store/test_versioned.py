"""The multi-version store against an in-memory model, on a real RocksDB."""

import random
from pathlib import Path
from typing import Any

from epochstate.daemon.store import keycodec
from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.versioned import StoreChanges, VersionedStore


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
