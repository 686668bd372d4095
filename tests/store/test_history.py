"""A key's versions and each epoch's changed keys against an in-memory model, on a real RocksDB."""

import random
from pathlib import Path
from typing import Any

from epochstate.daemon.codec import keycodec
from epochstate.daemon.store import history, layout
from epochstate.daemon.store.descriptors import EpochRecord, JobProgress
from epochstate.daemon.store.placement import StoreChanges
from epochstate.daemon.store.versioned import VersionedStore

Key = tuple[Any, ...]


def test_versions_and_changes_match_the_model_through_retention(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = VersionedStore(tmp_path / "db")
    job = store.add_job("j", "/cp", "q", "hdfs")
    sid = store.add_store("j", 0, "agg", "default", 2, "{}", "{}").store_id
    keys = [(i, f"k{i % 5}") for i in range(30)]
    live: dict[Key, bytes] = {}
    # epoch -> key -> new payload (None: removed), as written.
    written: dict[int, dict[Key, bytes | None]] = {}
    before: dict[int, dict[Key, bytes | None]] = {}
    for epoch in range(24):
        changes: StoreChanges = {}
        written[epoch], before[epoch] = {}, {}
        for key in rng.sample(keys, 10):
            encoded = keycodec.encode_fields(key)
            if rng.random() < 0.3:
                changes[encoded] = None
                if key in live:  # removing an absent key writes nothing
                    written[epoch][key], before[epoch][key] = None, live.pop(key)
            else:
                # Sometimes the same value again: still a version (Spark wrote it).
                payload = live.get(key) if rng.random() < 0.2 and key in live else keycodec.encode((epoch,))
                assert payload is not None
                changes[encoded] = payload
                written[epoch][key], before[epoch][key] = payload, live.get(key)
                live[key] = payload
        record = EpochRecord(epoch, epoch, epoch, 0)
        store.apply_epoch(job, epoch, {sid: changes}, record, fresh=epoch == 0)
        if epoch % 6 == 5:
            store.apply_retention(job, epoch - 9)

    view = store.view()
    progress = view.progress(job.job_id)
    assert (progress.oldest, progress.newest) == (14, 23)
    first = history.first_changes_epoch(progress)
    assert first == 15
    found = history.changes(view, sid, first, progress.newest)
    for epoch in range(first, progress.newest + 1):
        expected = sorted(
            (keycodec.encode_fields(k), p, None if p is not None else before[epoch][k])
            for k, p in written[epoch].items()
        )
        assert [tuple(c) for c in found[epoch]] == expected, epoch
    # A sub-range is the same as the slice of the whole one; the change index and a
    # walk over the store agree, and an epoch without an index (written by a daemon
    # before it) is walked.
    assert history.changes(view, sid, 18, 19) == {e: found[e] for e in (18, 19)}
    assert history.walk(view, sid, first, progress.newest) == found
    indexed = [bytes(k) for k in store.db.keys() if isinstance(k, bytes) and k[:1] == layout.CHANGED]  # noqa: SIM118
    # Retention dropped the index of the epochs whose changes are not served any more.
    assert {layout.changed_epoch(k) for k in indexed} == set(range(first, progress.newest + 1))
    for index_key in indexed:
        if layout.changed_epoch(index_key) in (16, 20):
            store.db.delete(index_key)
    assert history.changes(store.view(), sid, first, progress.newest) == found

    for key in keys:
        encoded = keycodec.encode_fields(key)
        got = list(history.versions(view, sid, encoded, progress.newest))
        epochs = [v.epoch for v in got]
        assert epochs == sorted(epochs, reverse=True)
        # Every version written after the oldest retained epoch is there, as written.
        wrote = [(e, written[e][key]) for e in sorted(written, reverse=True) if key in written[e]]
        retained = [(e, p) for e, p in wrote if e > progress.oldest]
        assert [tuple(v) for v in got[: len(retained)]] == retained, key
        assert list(history.versions(view, sid, encoded, 16)) == [v for v in got if v.epoch <= 16]
    store.close()


def test_changes_are_known_from_the_epoch_after_the_oldest_retained() -> None:
    assert history.first_changes_epoch(JobProgress(-1, -1)) == -1
    assert history.first_changes_epoch(JobProgress(5, 0)) == 0
    assert history.first_changes_epoch(JobProgress(5, 3)) == 4
