"""An alias over two real Spark checkpoints swapped in ZooKeeper: each epoch as Spark's reader has it.

The old job is the session's windowed count on the HDFS-backed provider, the new
one the same query on RocksDB with changelog checkpointing (a new version that
moved its state store): the session's workloads, ingested here by the daemon's
own followers into one store, read through the real servicer over gRPC, with the
alias, the jobs' mappings of their input and the swap in the real ZooKeeper. The
new job started one input epoch later, so each alias epoch after the swap epoch
is a different batch of it than of the old job, and the oracle tells them apart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.client import KazooClient

from epochstate.client import EpochNotReady, EpochStateClient
from epochstate.core.alias.records import AliasRecord
from epochstate.core.alias.registry import AliasRegistry
from epochstate.core.swap.records import SwapRecord
from epochstate.core.swap.registry import SwapRegistry
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.subject_records import SubjectSourceRecord
from epochstate.daemon.ingest.follower import JobFollower
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.runtime import NoRegistry
from epochstate.daemon.server.aliases import Aliases
from epochstate.daemon.server.handlers import add_to_server
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.service import EpochStateService
from epochstate.daemon.store.catalog import Catalog, JobEntry
from epochstate.daemon.store.versioned import VersionedStore
from tests.fixtures.oracle import StoreOracle, canon, plain, spark_store

pytestmark = pytest.mark.spark

IN, OUT, ALIAS = "in", "out", "windows"
OLD, NEW = "windows-v1", "windows-v2"
STARTED_AT = {OLD: 0, NEW: 1}  # the input epoch each job's batch 0 read
SWAP_EPOCH = 2


class _NoIngest:
    def follow(self, job: str, checkpoint: str) -> JobEntry:
        raise AssertionError("not called")

    def poke(self, job: str, epoch: int | None = None, run_id: str = "", query_id: str = "") -> None:
        pass


@pytest.fixture
def client(
    tmp_path: Path,
    zk_client: KazooClient,
    checkpoints: dict[str, Path],
    rocksdb_checkpoints: dict[str, Path],
) -> Iterator[EpochStateClient]:
    store = VersionedStore(tmp_path / "db")
    catalog = Catalog()
    for job, checkpoint in ((OLD, checkpoints["window"]), (NEW, rocksdb_checkpoints["window-changelog"])):
        follower = JobFollower(job, str(checkpoint), store, NoRegistry(), 1000, scratch_dir=tmp_path)
        while follower.step() is not None:
            pass
        catalog.put(follower.entry)
        catalog.advance(job, follower.progress)
        mapping = {j: j + STARTED_AT[job] for j in range(follower.progress.newest + 1)}
        zk_client.create(
            Layout().subject_source(IN, job),
            SubjectSourceRecord("aligned", mapping, 1).encode(),
            makepath=True,
        )
    view = SubjectView(zk_client)
    registry = AliasRegistry(zk_client)
    registry.define(AliasRecord(ALIAS, OLD, OUT, IN))
    service = EpochStateService(
        store, catalog, _NoIngest(), max_wait=1.0, aliases=Aliases(registry, view, catalog)
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add_to_server(service, server, DaemonMetrics())
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    found = EpochStateClient(f"127.0.0.1:{port}", timeout=10)
    try:
        yield found
    finally:
        found.close()
        view.close()
        catalog.close()
        server.stop(None)
        service.close()
        store.close()


def alias_state(client: EpochStateClient, epoch: int, keys: list[Any]) -> dict[str, Any]:
    """The alias's store at ``epoch`` as Spark's reader lists it, by lookups and by a paged scan."""
    looked = client.multi_get(ALIAS, keys, epoch=epoch)
    assert {lk.epoch for lk in looked} == {epoch}
    got = {canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition) for lk in looked if lk.found}
    scanned = {
        canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition)
        for lk in client.scan(ALIAS, epoch=epoch, page_size=2)
    }
    assert scanned == got
    return got


def test_the_alias_reads_each_epoch_from_its_job_as_sparks_reader_has_it(
    spark: Any,
    client: EpochStateClient,
    zk_client: KazooClient,
    checkpoints: dict[str, Path],
    rocksdb_checkpoints: dict[str, Path],
) -> None:
    # Alias epochs 1..2 are the old job's batches 1..2; 3 is the new job's batch 2, not
    # the old job's batch 3.
    old: StoreOracle = spark_store(spark, checkpoints["window"], [1, 2, 3])
    new: StoreOracle = spark_store(spark, rocksdb_checkpoints["window-changelog"], [2])
    keys = list({canon(k): k for k in [*old.keys(), *new.keys()]}.values())
    swaps = SwapRegistry(zk_client)
    now = int(time.time() * 1000)
    swaps.create(OUT, lambda _: SwapRecord(1, OUT, IN, OLD, NEW, SWAP_EPOCH, "planned", now, now + 600_000))

    pinned = {k: alias_state(client, k, keys) for k in (1, 2)}
    assert pinned == {1: old.states[1], 2: old.states[2]}
    assert old.states[3] != new.states[2]  # the oracle tells the two jobs' answers apart
    with pytest.raises(EpochNotReady, match="not decided yet"):
        client.get(ALIAS, keys[0], epoch=3)

    swaps.update(OUT, lambda r: r.with_prepared(OLD, now).with_prepared(NEW, now))
    swaps.update(OUT, lambda r: r.with_committed(NEW, 1, now))
    assert alias_state(client, 3, keys) == new.states[2]
    assert {k: alias_state(client, k, keys) for k in (1, 2)} == pinned  # unchanged by the swap
    listed = client.epochs(ALIAS)
    newest = {j.job: j.latest_epoch for j in client.jobs()}[NEW]
    assert [(e.epoch, e.job, e.job_epoch) for e in listed] == [
        *((k, OLD, k) for k in range(SWAP_EPOCH + 1)),
        *((j + STARTED_AT[NEW], NEW, j) for j in range(SWAP_EPOCH, newest + 1)),
    ]
