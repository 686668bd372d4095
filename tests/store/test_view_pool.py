"""Read views are reused only while the store is unchanged (a real RocksDB)."""

from pathlib import Path

from epochstate.daemon.codec import keycodec
from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.versioned import VersionedStore
from epochstate.daemon.store.view_pool import ReadViews


def record(epoch: int) -> EpochRecord:
    return EpochRecord(epoch=epoch, committed_at_ms=epoch, ingested_at_ms=epoch, watermark_ms=0)


def test_a_view_is_reused_until_the_store_is_written(tmp_path: Path) -> None:
    store = VersionedStore(tmp_path / "db")
    job = store.add_job("j", "/cp", "q", "hdfs")
    sid = store.add_store("j", 0, "agg", "default", 1, "{}", "{}").store_id
    key = keycodec.encode_fields(("k",))
    store.apply_epoch(job, 0, {sid: {key: keycodec.encode((1,))}}, record(0), fresh=True)
    views = ReadViews(store)

    first = views.view()
    concurrent = views.view()  # a view serves one read at a time
    assert concurrent is not first
    views.done(first)
    views.done(concurrent)
    reused = views.view()
    assert reused in (first, concurrent)
    views.done(reused)

    store.apply_epoch(job, 1, {sid: {key: keycodec.encode((2,))}}, record(1), fresh=False)
    fresh = views.view()
    assert fresh not in (first, concurrent)  # the write made every earlier view stale
    assert fresh.progress(job.job_id).newest == 1
    (found,) = fresh.payloads(sid, [key], 1)
    assert found is not None and keycodec.decode(found) == (2,)
    views.done(first)  # a stale view given back is dropped, not handed out again
    assert views.view() is not first

    views.done(fresh)
    views.clear()
    store.close()
    views.done(fresh)  # after close: nothing to keep, and no error
