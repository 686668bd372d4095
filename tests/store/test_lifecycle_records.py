"""Store shapes, skipped epochs and the provider: written with their epoch, kept,
retired and dropped with the job."""

from pathlib import Path

from epochstate.daemon.codec import keycodec
from epochstate.daemon.store.descriptors import EpochRecord, StoreShape
from epochstate.daemon.store.versioned import VersionedStore


def record(epoch: int) -> EpochRecord:
    return EpochRecord(epoch=epoch, committed_at_ms=epoch, ingested_at_ms=epoch, watermark_ms=0)


def test_shapes_and_unavailable_epochs_live_and_die_with_their_job(tmp_path: Path) -> None:
    store = VersionedStore(tmp_path / "db")
    job = store.add_job("j", "/cp", "q", "unknown")
    job = store.set_provider(job, "rocksdb")
    assert store.require_job("j").provider == "rocksdb"
    first = store.add_store("j", 0, "agg", "default", 1, '"k1"', '"v1"', first_epoch=0)
    later = StoreShape(3, '"k2"', '"v1"', 4)  # new schemas and a repartition at epoch 3
    store.apply_epoch(job, 0, {first.store_id: {keycodec.encode_fields(("a",)): b"x"}}, record(0), fresh=True)
    skipped = {1: "bad", 2: "gap"}
    store.apply_epoch(job, 3, {}, record(3), shapes=[(first.store_id, later)], unavailable=skipped)
    store.close()

    store = VersionedStore(tmp_path / "db")  # persisted
    assert store.shapes(first) == [StoreShape(0, '"k1"', '"v1"', 1), later]
    assert store.unavailable(job.job_id) == {1: "bad", 2: "gap"}
    store.apply_epoch(job, 4, {}, record(4))
    store.apply_retention(job, 2)
    assert store.unavailable(job.job_id) == {2: "gap"}  # retired with the epochs before the floor
    store.drop_job(job)
    assert store.unavailable(job.job_id) == {} and store.shapes(first) == [first.first_shape]


def test_a_shape_recorded_before_shapes_named_partitions_has_the_count_before_it() -> None:
    # A schema change as a daemon of layout 3 recorded it: no partition count.
    raw = b'{"first_epoch": 2, "key_schema_json": "\\"k2\\"", "value_schema_json": "\\"v1\\""}'
    assert StoreShape.from_json(raw, 3) == StoreShape(2, '"k2"', '"v1"', 3)
    relaid = StoreShape(5, '"k2"', '"v1"', 7)
    assert StoreShape.from_json(relaid.to_json(), 3) == relaid
