"""A secondary of the daemon's store follows the writer and answers no epoch it has not
published (a real RocksDB: the writer and its secondary in one process)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from epochstate.daemon.codec import keycodec
from epochstate.daemon.store.descriptors import EpochRecord, JobProgress, StoreShape
from epochstate.daemon.store.errors import LayoutMismatch
from epochstate.daemon.store.secondary import NoStore, SecondaryStore
from epochstate.daemon.store.secondary_catalog import SecondaryCatalog
from epochstate.daemon.store.versioned import VersionedStore


def record(epoch: int) -> EpochRecord:
    return EpochRecord(epoch=epoch, committed_at_ms=epoch, ingested_at_ms=epoch, watermark_ms=0)


def struct(field: str) -> str:
    return (
        f'{{"type":"struct","fields":[{{"name":"{field}","type":"string","nullable":true,"metadata":{{}}}}]}}'
    )


KEY, VALUE, VALUE2 = struct("k"), struct("v"), struct("w")
KEYS = [keycodec.encode_fields((k,)) for k in ("a", "b", "c")]


def test_the_secondary_shows_each_epoch_once_caught_up_and_published(tmp_path: Path) -> None:
    primary = VersionedStore(tmp_path / "store")
    job = primary.add_job("j", "/cp", "q", "hdfs")
    sid = primary.add_store("j", 0, "agg", "default", 1, KEY, VALUE).store_id
    primary.apply_epoch(job, 0, {sid: {KEYS[0]: keycodec.encode((0,))}}, record(0), fresh=True)
    follower = SecondaryCatalog(SecondaryStore(tmp_path / "store", tmp_path / "reader"))
    assert follower.catalog.get("j").progress == JobProgress(0, 0)

    # Epoch 1 brings a new shape with its data: written, not yet seen.
    shape = StoreShape(1, KEY, VALUE2, 1)
    changes = {KEYS[0]: None, KEYS[1]: keycodec.encode((1,))}
    primary.apply_epoch(job, 1, {sid: changes}, record(1), shapes=[(sid, shape)])
    view = follower.views.view()
    assert view.progress(job.job_id).newest == 0
    follower.views.done(view)

    # Caught up but not published: the views still stop at the published epoch, whose
    # entry knows its shapes; the data of epoch 0 reads as it did.
    assert follower.store.catch_up()
    view = follower.views.view()
    assert view.progress(job.job_id) == JobProgress(0, 0)
    assert view.payloads(sid, KEYS, 0) == primary.view().payloads(sid, KEYS, 0)
    follower.views.done(view)

    follower._publish()
    entry = follower.catalog.get("j")
    assert entry.progress == JobProgress(1, 0)
    assert [s.first_epoch for s in entry.store(0, "default").schemas] == [0, 1]
    view = follower.views.view()
    for epoch in (0, 1):
        assert view.payloads(sid, KEYS, epoch) == primary.view().payloads(sid, KEYS, epoch)
    follower.views.done(view)

    # Retention, then the job dropped: the reader follows both.
    primary.apply_epoch(job, 2, {sid: {KEYS[2]: keycodec.encode((2,))}}, record(2))
    primary.apply_retention(job, 2)
    follower.catch_up()
    assert follower.catalog.get("j").progress == JobProgress(2, 2)
    held = follower.views.view()
    primary.drop_job(job)
    follower.catch_up()
    assert [e.descriptor.name for e in follower.catalog.jobs()] == []
    assert held.progress(job.job_id) == JobProgress(-1, -1)  # published: nothing of it
    assert follower.views.view().dropped(job.job_id)
    follower.close()
    primary.close()


def test_a_waiting_read_wakes_when_the_reader_catches_up(tmp_path: Path) -> None:
    primary = VersionedStore(tmp_path / "store")
    job = primary.add_job("j", "/cp", "q", "hdfs")
    sid = primary.add_store("j", 0, "agg", "default", 1, KEY, VALUE).store_id
    primary.apply_epoch(job, 0, {sid: {KEYS[0]: keycodec.encode((0,))}}, record(0), fresh=True)
    follower = SecondaryCatalog(SecondaryStore(tmp_path / "store", tmp_path / "reader"), interval=0.005)
    follower.start()
    waited: list[JobProgress | None] = []
    waiter = threading.Thread(
        target=lambda: waited.append(follower.catalog.wait_until("j", lambda p: p.newest >= 1, 30.0))
    )
    waiter.start()
    primary.apply_epoch(job, 1, {sid: {KEYS[1]: keycodec.encode((1,))}}, record(1))
    waiter.join()
    assert waited == [JobProgress(1, 0)]
    follower.close()
    primary.close()


def test_no_store_or_another_layout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NoStore, match="no daemon's store"):
        SecondaryStore(tmp_path / "nothing", tmp_path / "reader")
    primary = VersionedStore(tmp_path / "store")
    primary.db.put(b"V", b"99")
    primary.db.flush()
    with pytest.raises(LayoutMismatch, match="layout version 99"):
        SecondaryStore(tmp_path / "store", tmp_path / "reader")
    primary.close()


def trusted(store: SecondaryStore) -> None:
    """Until the primary's files are older than a clock tick or so: their signature is
    then what decides whether a catch-up runs."""
    deadline = time.monotonic() + 10
    while store._files.signature() is None:
        assert time.monotonic() < deadline, "the primary's files keep changing"
        time.sleep(0.005)


def test_a_catch_up_runs_only_when_a_primary_file_changed(tmp_path: Path) -> None:
    primary = VersionedStore(tmp_path / "store")
    job = primary.add_job("j", "/cp", "q", "hdfs")
    sid = primary.add_store("j", 0, "agg", "default", 1, KEY, VALUE).store_id
    primary.apply_epoch(job, 0, {sid: {KEYS[0]: keycodec.encode((0,))}}, record(0), fresh=True)
    follower = SecondaryCatalog(SecondaryStore(tmp_path / "store", tmp_path / "reader"))
    store = follower.store
    trusted(store)
    store.catch_up()
    assert not store.catch_up()  # nothing changed: RocksDB not asked
    assert store._seen is not None and store._files.signature() == store._seen

    # A write appends to the write-ahead log; a flush writes a table and starts a new log.
    for epoch, flush in ((1, False), (2, True), (3, False)):
        primary.apply_epoch(job, epoch, {sid: {KEYS[epoch % 3]: keycodec.encode((epoch,))}}, record(epoch))
        if flush:
            assert primary._db is not None
            primary._db.flush()
        trusted(store)
        assert store.catch_up(), f"epoch {epoch}"
        follower._publish()
        assert follower.catalog.get("j").progress.newest == epoch
    follower.close()
    primary.close()
