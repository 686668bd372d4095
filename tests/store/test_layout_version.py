"""A store written with another layout version is refused, by the store and by the daemon's CLI."""

import subprocess
import sys
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

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
    with pytest.raises(LayoutMismatch, match=r"layout version 1, this daemon writes version 2; delete"):
        VersionedStore(tmp_path / "db")
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))  # refused, and released: not left locked
    assert db.get(layout.LAYOUT) is None
    db.close()


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
