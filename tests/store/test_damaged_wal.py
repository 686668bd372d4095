"""A damaged write-ahead log: the store refuses to open rather than drop synced epochs.

A child process writes epochs into a real store (each batch synced) and dies without
closing it, so every epoch lives only in RocksDB's write-ahead log. Bytes flipped in
the middle of that log make a record unreadable. RocksDB's default recovery would
stop there silently and open the store without the later epochs, synced and
announced as they were (shown below on a copy); the daemon's store refuses to open
(StoreDamaged), and the daemon refuses to start with that error. A torn tail (the
end of the log cut, as a power loss leaves it) still opens.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from epochstate.daemon.store import layout
from epochstate.daemon.store.errors import StoreDamaged
from epochstate.daemon.store.versioned import VersionedStore
from tests.fixtures.daemon import DaemonProcess

EPOCHS = 8

WRITER = """
import os, sys
from epochstate.daemon.codec import keycodec
from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.versioned import VersionedStore

store = VersionedStore(sys.argv[1])
job = store.add_job("j", "/cp", "q", "hdfs")
sid = store.add_store("j", 0, "agg", "default", 2, "{}", "{}").store_id
for epoch in range(int(sys.argv[2])):
    changes = {keycodec.encode_fields((i,)): keycodec.encode((epoch, i)) for i in range(2000)}
    store.apply_epoch(job, epoch, {sid: changes}, EpochRecord(epoch, epoch, epoch, 0, ()), fresh=epoch == 0)
print(job.job_id, flush=True)
os._exit(0)  # no close, no flush: the epochs are in the write-ahead log only
"""


def write_unflushed(path: Path) -> int:
    """A store at ``path`` whose EPOCHS epochs are only in its WAL; the job's id."""
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(path), str(EPOCHS)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert not list(path.glob("*.sst")), "nothing may be flushed"
    return int(done.stdout)


def wal(path: Path) -> Path:
    (log,) = [p for p in path.glob("*.log") if p.stat().st_size > 0]
    return log


def newest_epoch(db: Rdict, job_id: int) -> int:
    raw = db.get(layout.progress_key(job_id))
    return -1 if raw is None else layout.unpack_progress(raw)[0]


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, int]:
    """A store whose WAL has bytes flipped in a record in the middle of the log."""
    path = tmp_path / "store"
    job_id = write_unflushed(path)
    log = wal(path)
    data = bytearray(log.read_bytes())
    middle = len(data) // 2
    for at in range(middle, middle + 8):
        data[at] ^= 0xFF
    log.write_bytes(bytes(data))
    return path, job_id


def test_rocksdb_default_recovery_would_silently_drop_synced_epochs(
    damaged: tuple[Path, int], tmp_path: Path
) -> None:
    """The failure the store's recovery mode prevents, on a copy with RocksDB's defaults."""
    path, job_id = damaged
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    db = Rdict(str(copy), Options(raw_mode=True))
    try:
        newest = newest_epoch(db, job_id)
    finally:
        db.close()
    assert 0 <= newest < EPOCHS - 2, f"opened with epochs up to {newest} of {EPOCHS - 1}, no error"


def test_a_store_whose_wal_is_damaged_mid_log_refuses_to_open(damaged: tuple[Path, int]) -> None:
    path, _ = damaged
    with pytest.raises(StoreDamaged, match="Corruption"):
        VersionedStore(path)


def test_the_daemon_refuses_to_start_on_it(damaged: tuple[Path, int], tmp_path: Path) -> None:
    path, _ = damaged
    data_dir = tmp_path / "daemon"
    data_dir.mkdir()
    shutil.move(str(path), str(data_dir / "store"))
    daemon = DaemonProcess(data_dir, {})
    with pytest.raises(RuntimeError, match="daemon exited") as failed:
        daemon.start()
    assert "cannot open the daemon's store" in str(failed.value) and "Corruption" in str(failed.value)


def test_a_torn_tail_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "store"
    job_id = write_unflushed(path)
    log = wal(path)
    with log.open("r+b") as file:  # the last record half written
        file.truncate(log.stat().st_size - 1000)
    store = VersionedStore(path)
    try:
        assert store.progress(job_id).newest == EPOCHS - 2
    finally:
        store.close()
