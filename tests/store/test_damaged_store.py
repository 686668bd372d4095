"""A damaged store file is never read as "absent": every read path raises StoreDamaged.

Each test builds a real RocksDB store, closes it (its data lands in an SST file),
flips one byte inside a data block of that file, opens it again with an empty
block cache and reads everything it read before: each answer is either the one
the healthy store gave or StoreDamaged, and the damage is met at least once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from epochstate.daemon.codec import keycodec
from epochstate.daemon.store import layout
from epochstate.daemon.store.descriptors import EpochRecord, JobDescriptor, SourceRange
from epochstate.daemon.store.errors import StoreDamaged
from epochstate.daemon.store.placement import StoreChanges
from epochstate.daemon.store.versioned import StoreOptions, VersionedStore

T = TypeVar("T")
EPOCHS = 6
KEYS = [keycodec.encode_fields((i,)) for i in range(EPOCHS * 500 + 2500)]


# Stored once, literally (compression keeps a string that does not repeat): it marks the
# block of the first epoch record.
FIRST_SOURCE = "ZqXwVbKjYm"


def _record(epoch: int) -> EpochRecord:
    sources = (SourceRange(FIRST_SOURCE, None, None),) if epoch == 0 else ()
    return EpochRecord(
        epoch=epoch, committed_at_ms=epoch, ingested_at_ms=epoch, watermark_ms=0, sources=sources
    )


def _changes(epoch: int) -> StoreChanges:
    """A sliding window of keys: each epoch adds 500, updates 2,000 and removes 500."""
    changes: StoreChanges = {
        k: keycodec.encode((epoch, i)) for i, k in enumerate(KEYS[epoch * 500 : epoch * 500 + 2500])
    }
    if epoch:
        changes.update(dict.fromkeys(KEYS[(epoch - 1) * 500 : epoch * 500]))
    return changes


def _build(path: Path) -> tuple[JobDescriptor, int]:
    store = VersionedStore(path)
    job = store.add_job("j", "/cp", "q", "hdfs")
    sid = store.add_store("j", 0, "agg", "default", 2, "{}", "{}").store_id
    for epoch in range(EPOCHS):
        store.apply_epoch(job, epoch, {sid: _changes(epoch)}, _record(epoch), fresh=epoch == 0)
    store.close()  # flushes: everything is in one SST file now
    return job, sid


def _sst(path: Path) -> Path:
    (table,) = path.glob("*.sst")
    return table


def _flip(table: Path, offset: int) -> None:
    raw = bytearray(table.read_bytes())
    raw[offset] ^= 0xFF
    table.write_bytes(bytes(raw))


def _flip_at(table: Path, needle: bytes) -> None:
    """Damage the data block that holds ``needle`` (stored literally once in the file)."""
    raw = table.read_bytes()
    assert raw.count(needle) == 1, f"{needle!r} is not stored literally once in {table.name}"
    _flip(table, raw.index(needle) + len(needle) - 1)


def _reopen(path: Path) -> VersionedStore:
    return VersionedStore(path, StoreOptions(block_cache_mb=1))


def _outcome(read: Callable[[], T]) -> T | type[StoreDamaged]:
    try:
        return read()
    except StoreDamaged:
        return StoreDamaged


def _answers(store: VersionedStore, job: JobDescriptor, sid: int) -> dict[str, object]:
    """Every read the daemon makes of a job, one outcome each."""
    view = store.view()
    answers: dict[str, object] = {
        "progress": _outcome(lambda: view.progress(job.job_id)),
        "epochs": _outcome(lambda: store.epochs(job.job_id)),
        "record 3": _outcome(lambda: store.epoch_record(job.job_id, 3)),
        "jobs": _outcome(store.jobs),
        "stores": _outcome(lambda: store.stores("j")),
    }
    for epoch in range(EPOCHS):
        answers[f"scan {epoch}"] = _outcome(lambda e=epoch: view.scan(sid, e, b"", None, 100_000))  # type: ignore[misc]
        for start in range(0, len(KEYS), 250):
            chunk = KEYS[start : start + 250]
            answers[f"get {epoch} {start}"] = _outcome(lambda e=epoch, c=chunk: view.payloads(sid, c, e))  # type: ignore[misc]
    return answers


def _compare(healthy: dict[str, object], damaged: dict[str, object]) -> list[str]:
    """The reads that were refused; fails on any answer that differs from the healthy store's."""
    wrong = [name for name, got in damaged.items() if got is not StoreDamaged and got != healthy[name]]
    assert not wrong, f"{len(wrong)} reads answered differently, e.g. {wrong[:5]}"
    return [name for name, got in damaged.items() if got is StoreDamaged]


@pytest.mark.parametrize(
    "where",
    ["a data block", "the progress marker", "the epoch records"],
)
def test_every_read_of_a_damaged_block_is_refused_never_absent(tmp_path: Path, where: str) -> None:
    path = tmp_path / "db"
    job, sid = _build(path)
    healthy_store = _reopen(path)
    healthy = _answers(healthy_store, job, sid)
    healthy_store.close()
    assert StoreDamaged not in healthy.values()

    table = _sst(path)
    if where == "a data block":
        _flip(table, table.stat().st_size * 3 // 10)  # the versions fill most of the file
        store = _reopen(path)  # data blocks are checked by the reads, not at start-up
    else:
        store = _reopen(path)  # damaged while serving (at start-up the store would not open)
        _flip_at(
            table,
            layout.progress_key(job.job_id) if where == "the progress marker" else FIRST_SOURCE.encode(),
        )
    try:
        refused = _compare(healthy, _answers(store, job, sid))
    finally:
        store.close()
    print(f"{where}: {len(healthy)} reads, {len(refused)} refused with StoreDamaged, 0 wrong")
    assert refused
    if where == "a data block":
        assert any(name.startswith("scan") for name in refused)  # never a short scan
        assert any(name.startswith("get") for name in refused)  # never "absent"
    elif where == "the progress marker":
        assert "progress" in refused  # never "no epoch yet"
    else:
        assert "epochs" in refused  # never a short list


@pytest.mark.parametrize("where", ["the progress marker", "the epoch records", "the job descriptor"])
def test_a_store_whose_records_are_damaged_does_not_open(tmp_path: Path, where: str) -> None:
    """The start-up check reads every record but the versions (daemon/store/integrity.py)."""
    path = tmp_path / "db"
    job, _ = _build(path)
    needle = {
        "the progress marker": layout.progress_key(job.job_id),
        "the epoch records": FIRST_SOURCE.encode(),
        "the job descriptor": layout.job_key("j"),
    }[where]
    _flip_at(_sst(path), needle)
    with pytest.raises(StoreDamaged, match=r"start-up check|cannot be read"):
        _reopen(path)


def test_a_store_that_cannot_be_opened_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _build(path)
    _sst(path).unlink()  # a table file the manifest names is gone
    with pytest.raises(StoreDamaged, match="cannot open"):
        _reopen(path)


def test_the_newest_version_map_is_not_rebuilt_from_a_stopped_iteration(tmp_path: Path) -> None:
    """Reopened, the writer learns each key's newest version in one pass. A pass that
    RocksDB stopped must fail the epoch: taken for complete, the map would miss keys,
    and removing one of them would write no tombstone (the key would stay live)."""
    path = tmp_path / "db"
    job, sid = _build(path)
    _flip(_sst(path), _sst(path).stat().st_size * 6 // 10)
    store = _reopen(path)
    try:
        removals: StoreChanges = dict.fromkeys(KEYS[(EPOCHS - 1) * 500 : EPOCHS * 500 + 2500])
        with pytest.raises(StoreDamaged):
            store.apply_epoch(job, EPOCHS, {sid: removals}, _record(EPOCHS))
        assert store.progress(job.job_id).newest == EPOCHS - 1  # nothing was written
    finally:
        store.close()
