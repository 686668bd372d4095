"""A reader given some partitions reads those only: the same rows as the whole reader's
for them, and not one file of the others (their directories are deleted, and every
path the storage is asked about is recorded)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from epochstate.core.storage.local import LocalStorage
from epochstate.daemon.sources.changes import StateChange
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.readers import StoreReader, open_store_reader
from tests.e2e.test_reads import SCHEMA, counts
from tests.fixtures.streams import FileStream, copy_checkpoint

pytestmark = pytest.mark.spark

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PARTITIONS = 4


def _rows(batch: int) -> list[dict[str, Any]]:
    return [{"user": f"user-{(batch * 11 + i * 7) % 40}", "amount": batch + i} for i in range(20)]


@pytest.fixture(scope="module", params=["hdfs", "rocksdb"])
def checkpoint(request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three epochs of a count over forty users in four partitions, by either provider."""
    session = spark.newSession()
    session.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
    if request.param == "rocksdb":
        session.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        session.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    base = tmp_path_factory.mktemp(f"partitions-{request.param}")
    stream = FileStream(session, base / "in", base / "cp", counts, SCHEMA).start()
    try:
        for batch in range(3):
            stream.feed(_rows(batch))
    finally:
        stream.stop()
    return base / "cp"


def _reader(root: Path, partitions: tuple[int, ...] | None) -> StoreReader:
    checkpoint = Checkpoint(root)
    key, value = checkpoint.store_schema(0)
    return open_store_reader(checkpoint, 0, "default", PARTITIONS, key, value, partitions=partitions)


def _of(changes: Iterator[StateChange], partitions: set[int]) -> list[StateChange]:
    """The changes of ``partitions``, by partition and key: the readers promise the
    partitions in order, not the keys within one (HDFS full state is a hash map's)."""
    return _by_key(c for c in changes if c.partition in partitions)


def _by_key(changes: Iterable[StateChange]) -> list[StateChange]:
    return sorted(changes, key=lambda c: (c.partition, repr(c.key)))


def test_a_reader_of_some_partitions_reads_theirs_and_no_file_of_the_others(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _reader(checkpoint, None)
    assert whole.partitions == (0, 1, 2, 3)
    assert {c.partition for c in whole.full_state(3)} == {0, 1, 2, 3}
    # A copy without the state files of partitions 0 and 1 (the store's schema file,
    # read from partition 0, stays): a reader of 2 and 3 never needs them.
    copy = tmp_path / "cp"
    copy_checkpoint(checkpoint, copy)
    for partition in (0, 1):
        for entry in (copy / "state" / "0" / str(partition)).iterdir():
            if entry.name != "_metadata":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    asked: list[str] = []
    for name in ("listdir", "stat", "is_file", "is_dir", "read", "read_range", "local_file"):
        original = getattr(LocalStorage, name)

        def traced(self: Any, path: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            asked.append(str(path))
            return _original(self, path, *args, **kwargs)

        monkeypatch.setattr(LocalStorage, name, traced)
    some = _reader(copy, (2, 3))
    assert some.partitions == (2, 3)
    for version in (1, 2, 3):
        assert some.has_delta(version)
        assert _by_key(some.changes(version)) == _of(whole.changes(version), {2, 3})
        assert _by_key(some.full_state(version)) == _of(whole.full_state(version), {2, 3})
    some.has_full(3)
    state_paths = [p for p in asked if p.startswith(f"{copy}/state/0/") and "/_metadata" not in p]
    assert state_paths, "the storage was not traced"
    assert not [p for p in state_paths if "/state/0/0" in p or "/state/0/1" in p]
    # The whole reader does need them.
    with pytest.raises(Exception, match=r"does not exist|no such|not found|missing"):
        list(_reader(copy, None).full_state(3))
