"""A follower of some Spark partitions of a job stores those only, and the store remembers
which: following the job again for other partitions (a daemon restarted after its shards
moved) drops what it held and ingests the job anew, never a mix."""

from __future__ import annotations

from pathlib import Path

from epochstate.core.partition_ranges import PartitionRanges
from epochstate.daemon.ingest.follower import JobFollower
from epochstate.daemon.runtime import NoRegistry
from epochstate.daemon.store.versioned import VersionedStore
from epochstate.v1 import epochstate_pb2 as pb
from tests.sources.test_partition_selection import PARTITIONS, _reader, checkpoint

__all__ = ["checkpoint"]


def _follow(store: VersionedStore, root: Path, held: PartitionRanges | None) -> JobFollower:
    follower = JobFollower("orders", str(root), store, NoRegistry(), 1000, partitions=held)
    while follower.step() is not None:
        pass
    return follower


def _stored(store: VersionedStore, follower: JobFollower, epoch: int) -> dict[int, int]:
    """Keys stored at ``epoch`` per partition."""
    (handle,) = follower.entry.stores.values()
    versions = store.view().scan(handle.descriptor.store_id, epoch, b"", None, 10_000)
    found: dict[int, int] = {}
    for version in versions:
        partition = pb.Record.FromString(version.payload).partition
        found[partition] = found.get(partition, 0) + 1
    return found


def test_a_follower_of_some_partitions_stores_those_and_starts_over_for_others(
    checkpoint: Path, tmp_path: Path
) -> None:
    expected: dict[int, int] = {}
    for change in _reader(checkpoint, None).full_state(3):
        expected[change.partition] = expected.get(change.partition, 0) + 1
    assert set(expected) == set(range(PARTITIONS))
    store = VersionedStore(tmp_path / "db")
    try:
        high = PartitionRanges.of([(2, 3)])
        first = _follow(store, checkpoint, high)
        assert first.progress.newest == 2 and first.entry.descriptor.partitions == high
        assert _stored(store, first, 2) == {p: expected[p] for p in (2, 3)}

        # The same partitions again (a restart): the store is kept.
        again = _follow(store, checkpoint, high)
        assert again.entry.descriptor.job_id == first.entry.descriptor.job_id

        # Other partitions: dropped and ingested anew.
        low = PartitionRanges.of([(0, 1)])
        moved = _follow(store, checkpoint, low)
        assert moved.entry.descriptor.job_id != first.entry.descriptor.job_id
        assert moved.entry.descriptor.partitions == low and moved.progress.newest == 2
        assert _stored(store, moved, 2) == {p: expected[p] for p in (0, 1)}

        # The whole job (outside a group, or one shard of every partition).
        whole = _follow(store, checkpoint, None)
        assert whole.entry.descriptor.partitions is None
        assert _stored(store, whole, 2) == expected
    finally:
        store.close()
