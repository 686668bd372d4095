"""What following a checkpoint on S3 costs, request by request, and that what is kept
between requests never hides a change: checkpoints Spark wrote, uploaded to a real
S3-protocol server (moto), read through a storage that traces every request."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from epochstate.core.partition_ranges import PartitionRanges
from epochstate.core.storage.location import Location, StorageFactory, configure, default_factory
from epochstate.daemon.ingest.follower import JobFollower
from epochstate.daemon.runtime import NoRegistry
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import MissingCheckpointFile
from epochstate.daemon.store.versioned import VersionedStore
from tests.fixtures.s3 import CheckpointMirror, S3Server
from tests.fixtures.streams import copy_checkpoint
from tests.sources.test_partition_selection import checkpoint

__all__ = ["checkpoint"]

pytestmark = pytest.mark.spark


def _upload(server: S3Server, local: Path) -> tuple[CheckpointMirror, str]:
    mirror = CheckpointMirror(server, local, server.new_bucket(), "cp")
    mirror.sync()
    return mirror, mirror.uri


def _traced(tmp_path: Path, uri: str) -> tuple[StorageFactory, Location]:
    factory = StorageFactory(cache_dir=tmp_path / "cache")
    factory.stats.requests = []
    return factory, factory.open(uri)


def _requests(factory: StorageFactory, root: Location) -> Counter[tuple[str, str]]:
    assert factory.stats.requests is not None
    prefix = root.path + "/"
    found = Counter((op, path.removeprefix(prefix)) for op, path in factory.stats.requests)
    factory.stats.requests.clear()
    return found


def test_log_entries_are_read_once_and_new_ones_show_up(
    s3_server: S3Server, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    local = tmp_path / "cp"
    copy_checkpoint(checkpoints["window"], local)
    newest = max(int(p.name) for p in (local / "commits").iterdir() if p.name.isdigit())
    held_back = {name: (local / name / str(newest)).read_bytes() for name in ("commits", "offsets")}
    for name in held_back:
        (local / name / str(newest)).unlink()
    mirror, uri = _upload(s3_server, local)
    factory, root = _traced(tmp_path, uri)
    checkpoint = Checkpoint(root)
    assert checkpoint.committed_epochs() == list(range(newest))
    checkpoint.epoch_log(1)
    checkpoint.commit_entry(1)
    assert checkpoint.commit_time_ms(1) > 0  # from the listing
    assert _requests(factory, root) == Counter(
        {("list", "commits"): 1, ("get", "offsets/1"): 1, ("get", "commits/1"): 1}
    )
    for _ in range(2):
        checkpoint.epoch_log(1)
        checkpoint.commit_entry(1)
        checkpoint.commit_time_ms(1)
    assert _requests(factory, root) == Counter()
    # Nothing missing is remembered as missing: the epoch shows up once uploaded.
    with pytest.raises(MissingCheckpointFile):
        checkpoint.epoch_log(newest)
    for name, body in held_back.items():
        (local / name / str(newest)).write_bytes(body)
    mirror.sync()
    assert checkpoint.committed_epochs()[-1] == newest
    assert checkpoint.epoch_log(newest).epoch == newest
    assert not checkpoint.commits_rewritten


def test_operators_and_schemas_are_kept_until_looked_at_again(
    s3_server: S3Server, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    _, uri = _upload(s3_server, checkpoints["join"])
    factory, root = _traced(tmp_path, uri)
    checkpoint = Checkpoint(root)
    operators = checkpoint.operators()
    schemas = {s.name: checkpoint.store_schema(0, s.name) for s in operators[0].stores}
    first = _requests(factory, root)
    assert len(schemas) == 4 and sum(first.values()) > 0
    assert checkpoint.operators() == operators
    assert {s: checkpoint.store_schema(0, s) for s in schemas} == schemas
    assert _requests(factory, root) == Counter()
    checkpoint.forget_metadata()
    assert checkpoint.operators() == operators
    assert {s: checkpoint.store_schema(0, s) for s in schemas} == schemas
    assert _requests(factory, root) == first


def test_a_commit_entry_written_again_is_noticed_from_the_listing(
    s3_server: S3Server, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    mirror, uri = _upload(s3_server, checkpoints["dedup"])
    factory, root = _traced(tmp_path, uri)
    checkpoint = Checkpoint(root)
    checkpoint.committed_epochs()
    checkpoint.committed_epochs()
    assert not checkpoint.commits_rewritten
    time.sleep(1.1)  # the same bytes a second later, as a recreated checkpoint's entry
    body = (checkpoints["dedup"] / "commits" / "1").read_bytes()
    s3_server.client().put_object(Bucket=mirror.bucket, Key="cp/commits/1", Body=body)
    checkpoint.committed_epochs()
    assert checkpoint.commits_rewritten
    assert _requests(factory, root) == Counter({("list", "commits"): 3})


@pytest.mark.parametrize(
    ("name", "listener"),
    [("hdfs", False), ("hdfs", True), ("rocksdb-changelog", True), ("rocksdb-zip", True)],
)
def test_a_later_epoch_costs_the_listing_its_offsets_and_its_state_files(
    name: str,
    listener: bool,
    s3_server: S3Server,
    checkpoints: dict[str, Path],
    rocksdb_checkpoints: dict[str, Path],
    tmp_path: Path,
) -> None:
    local = {
        "hdfs": checkpoints["window"],
        "rocksdb-changelog": rocksdb_checkpoints["window-changelog"],
        "rocksdb-zip": rocksdb_checkpoints["window-zip"],
    }[name]
    _, uri = _upload(s3_server, local)
    factory, root = _traced(tmp_path, uri)
    store = VersionedStore(tmp_path / "store")
    before = default_factory()
    configure(factory)  # the follower opens its checkpoint through the traced storage
    try:
        follower = JobFollower("job", uri, store, NoRegistry(), 1000, scratch_dir=tmp_path)
        newest = follower.checkpoint.latest_committed()
        assert newest is not None and newest >= 4
        if listener:  # the listener reported every epoch, of one run
            for reported in range(newest + 1):
                follower.reported(reported, run_id="run-1", query_id=follower.entry.descriptor.query_id)
        assert follower.step() is not None  # epoch 0, in full
        _requests(factory, root)
        # Later epochs, read ahead of each other: every request over them all.
        later = []
        while (epoch := follower.next_epoch()) is not None:
            follower.step(epoch)
            later.append(epoch)
        assert later == list(range(1, newest + 1))
        spent = _requests(factory, root)
        suffix = {"hdfs": "delta", "rocksdb-changelog": "changelog", "rocksdb-zip": "zip"}[name]
        partitions = len(list((local / "state" / "0").glob("[0-9]*")))
        # A listing per step at most, and one finding nothing newer (a backlog is
        # worked off from a listing up to a second old).
        listings = spent[("list", "commits")]
        assert 1 <= listings <= len(later) + 1
        expected = Counter({("list", "commits"): listings})
        for epoch in later:
            if epoch != newest:  # the newest entry was read when the job was opened
                expected[("get", f"offsets/{epoch}")] = 1
            for p in range(partitions):
                expected[("get", f"state/0/{p}/{epoch + 1}.{suffix}")] = 1
        if not listener:
            # Unvouched epochs: the schema file's tag (S3's tag is its MD5: no GET).
            expected[("head", "state/0/0/_metadata/schema")] = len(later)
        tables = Counter({k: v for k, v in spent.items() if "/SSTs/" in k[1]})
        # Each state file of each version once (deltas, changelogs, or zips and the
        # table files they add), its offset entry and a listing: nothing else.
        assert spent - tables == expected
        assert all(n == 1 for n in tables.values()) and (name == "rocksdb-zip") == bool(tables)

        # A report of a new query run: the next epoch reads operators and schemas again.
        follower.reported(newest + 1, run_id="run-2")
        assert follower._metadata_due(newest + 1)
        assert not follower._metadata_due(newest + 2)
    finally:
        configure(before)
        store.close()


def test_a_follower_of_some_partitions_sends_no_request_for_the_others(
    s3_server: S3Server, checkpoint: Path, tmp_path: Path
) -> None:
    """Epochs 0-2 of a job of four partitions, followed for partitions 2 and 3 only: not
    one request for a state file of partitions 0 and 1 (their directories are never
    listed either); partition 0's schema file is the store's, read as for any store."""
    _, uri = _upload(s3_server, checkpoint)
    factory, root = _traced(tmp_path, uri)
    store = VersionedStore(tmp_path / "store")
    before = default_factory()
    configure(factory)
    try:
        held = PartitionRanges.of([(2, 3)])
        follower = JobFollower("job", uri, store, NoRegistry(), 1000, scratch_dir=tmp_path, partitions=held)
        while follower.step() is not None:
            pass
        assert follower.progress.newest == 2
        spent = _requests(factory, root)
    finally:
        configure(before)
        store.close()
    state = {path for _, path in spent if path.startswith("state/0/")}
    assert {p.split("/")[2] for p in state if not p.startswith("state/0/_")} >= {"2", "3"}
    others = {p for p in state if p.split("/")[2] in ("0", "1") and "/_metadata/" not in p}
    assert not others, sorted(others)
