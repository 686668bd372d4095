"""A store written with another layout version is refused, by the store and by the daemon's CLI."""

import subprocess
import sys
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from epochstate.core.partition_ranges import PartitionRanges
from epochstate.daemon.store import layout
from epochstate.daemon.store.errors import LayoutMismatch
from epochstate.daemon.store.versioned import VersionedStore


def _layout_one_store(path: Path) -> None:
    """A store as layout 1 left it: data, and no version key."""
    VersionedStore(path).close()
    db = Rdict(str(path), Options(raw_mode=True))
    db.delete(layout.LAYOUT)
    db.put(layout.progress_key(1), b"\0" * 16)
    db.close()


def test_new_store_is_stamped_and_reopens(tmp_path: Path) -> None:
    VersionedStore(tmp_path / "db").close()
    store = VersionedStore(tmp_path / "db")
    assert store.db.get(layout.LAYOUT) == str(layout.LAYOUT_VERSION).encode()
    store.close()


def test_store_of_another_layout_is_refused(tmp_path: Path) -> None:
    _layout_one_store(tmp_path / "db")
    with pytest.raises(LayoutMismatch, match=r"layout version 1, this daemon writes version 4; delete"):
        VersionedStore(tmp_path / "db")
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))  # refused, and released: not left locked
    assert db.get(layout.LAYOUT) is None
    db.close()


def test_a_layout_2_store_is_read_as_whole_jobs_and_restamped(tmp_path: Path) -> None:
    store = VersionedStore(tmp_path / "db")
    store.add_job("orders", "/cp/orders", "q-1", "hdfs")
    store.close()
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    db.put(layout.LAYOUT, b"2")
    # Layout 2's descriptor, as it wrote it: no partitions.
    db.put(
        layout.job_key("orders"),
        b'{"checkpoint": "/cp/orders", "job_id": 1, "name": "orders", "provider": "hdfs", "query_id": "q-1"}',
    )
    db.close()
    store = VersionedStore(tmp_path / "db")
    assert store.db.get(layout.LAYOUT) == b"4"
    found = store.job("orders")
    assert found is not None and found.partitions is None
    store.close()


def test_a_job_remembers_the_partitions_its_data_covers(tmp_path: Path) -> None:
    store = VersionedStore(tmp_path / "db")
    held = PartitionRanges.of([(2, 3), (0, 0)])
    added = store.add_job("orders", "/cp/orders", "q-1", "unknown", held)
    store.set_provider(added, "rocksdb")
    store.add_job("all", "/cp/all", "q-2", "hdfs")
    store.close()
    store = VersionedStore(tmp_path / "db")
    orders, whole = store.job("orders"), store.job("all")
    assert orders is not None and whole is not None
    assert (orders.partitions, orders.provider) == (held, "rocksdb")
    assert held is not None and str(held) == "0, 2-3" and held.partitions(4) == (0, 2, 3)
    assert whole.partitions is None and b"partitions" not in whole.to_json()
    store.close()


def test_daemon_refuses_it_with_exit_code_1(tmp_path: Path) -> None:
    _layout_one_store(tmp_path / "data" / "store")
    started = subprocess.run(
        [
            *(sys.executable, "-m", "epochstate.cli.app", "daemon"),
            *("--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0", "--listen-unix", ""),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 1, started.stderr
    assert "has layout version 1" in started.stderr and "re-ingests every retained epoch" in started.stderr
