"""History, Changes and as_of_time through the real servicer and gRPC, on a temporary store.

Epochs are written the way ingest writes them (one batch each, then announced in
the catalog), so these tests pin the contract's edges in milliseconds: tombstones,
ranges that never change once answered, paging, resuming, following, retention,
bad ranges and limits. Against Spark, see tests/e2e (the scenario and oracle runs).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from epochstate.client import EpochStateClient
from epochstate.client.arrow import changes_batches_of
from epochstate.client.arrow.changes import epoch_batches
from epochstate.client.errors import (
    DeadlineExceeded,
    EpochRetired,
    InvalidArgument,
    NoSuchEpoch,
    from_rpc_error,
)
from epochstate.core.partitioner import partition_of
from epochstate.core.sparktypes import AtomicType, StructField, StructType, type_to_json
from epochstate.daemon.codec.keycodec import encode_fields
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.server.handlers import add_to_server
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.service import EpochStateService
from epochstate.daemon.store.catalog import Catalog, JobEntry, StoreHandle
from epochstate.daemon.store.descriptors import EpochRecord, JobDescriptor
from epochstate.daemon.store.versioned import VersionedStore
from epochstate.v1 import epochstate_pb2 as pb

KEY = StructType((StructField("user", AtomicType("string")),))
VALUE = StructType((StructField("count", AtomicType("long")),))
PARTITIONS = 2
JOB = "orders"
# How long the servicer lets a read without a deadline wait for its epoch.
MAX_WAIT = 1.0

# epoch -> user -> new count (None: removed). Epoch 3 changes nothing; epoch 4 writes
# a's count again unchanged (Spark wrote it: a version, and a change).
EPOCHS: dict[int, dict[str, int | None]] = {
    0: {"a": 1, "b": 1},
    1: {"a": 2},
    2: {"b": None, "c": 1},
    3: {},
    4: {"b": 5, "a": 2},
    5: {"a": None},
}


def committed_at(epoch: int) -> int:
    return 1000 * (epoch + 1)


class _NoIngest:
    def follow(self, job: str, checkpoint: str) -> JobEntry:
        raise AssertionError("not called")

    def poke(self, job: str, epoch: int | None = None, run_id: str = "", query_id: str = "") -> None:
        pass


@dataclass
class Served:
    store: VersionedStore
    catalog: Catalog
    job: JobDescriptor
    store_id: int
    client: EpochStateClient

    def apply(self, epoch: int, changes: dict[str, int | None]) -> None:
        """Write one epoch as ingest does, and announce it."""
        encoder = RecordEncoder(KEY, VALUE)
        encoded = {
            encode_fields([user]): None
            if count is None
            else encoder.present(partition_of([user], KEY, PARTITIONS), (user,), (count,))
            for user, count in changes.items()
        }
        record = EpochRecord(epoch, committed_at(epoch), committed_at(epoch), 0)
        result = self.store.apply_epoch(self.job, epoch, {self.store_id: encoded}, record, fresh=epoch == 0)
        self.catalog.advance(JOB, result.progress)

    def retain_from(self, oldest: int) -> None:
        self.store.apply_retention(self.job, oldest)
        self.catalog.advance(JOB, self.store.progress(self.job.job_id))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = VersionedStore(tmp_path / "db")
    job = store.add_job(JOB, "/cp", "q-1", "hdfs")
    schema = (json.dumps(type_to_json(KEY)), json.dumps(type_to_json(VALUE)))
    descriptor = store.add_store(JOB, 0, "stateStoreSave", "default", PARTITIONS, *schema)
    catalog = Catalog()
    catalog.put(JobEntry(job, stores={(0, "default"): StoreHandle.of(descriptor)}))
    service = EpochStateService(store, catalog, _NoIngest(), max_wait=MAX_WAIT)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    add_to_server(service, server, DaemonMetrics())
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = EpochStateClient(f"127.0.0.1:{port}", timeout=5)
    found = Served(store, catalog, job, descriptor.store_id, client)
    for epoch, changes in EPOCHS.items():
        found.apply(epoch, changes)
    try:
        yield found
    finally:
        client.close()
        catalog.close()
        server.stop(None)
        service.close()
        store.close()


def model(epoch: int) -> dict[str, int]:
    state: dict[str, int] = {}
    for e in range(epoch + 1):
        for user, count in EPOCHS.get(e, {}).items():
            if count is None:
                state.pop(user, None)
            else:
                state[user] = count
    return state


def versions(history: Any) -> list[tuple[int, int | None, int | None]]:
    """(valid from, valid to, count or None for a deletion) of each version."""
    return [(v.valid_from, v.valid_to, None if v.deleted else v.value["count"]) for v in history.versions]


def test_a_keys_history_has_every_version_with_its_validity_and_tombstones(served: Served) -> None:
    client = served.client
    a = client.history(JOB, ["a"])
    assert (a.from_epoch, a.to_epoch) == (0, 5)
    assert versions(a) == [(0, 1, 1), (1, 4, 2), (4, 5, 2), (5, None, None)]
    deleted = a.versions[-1]
    assert deleted.key["user"] == "a" and deleted.value is None
    assert deleted.partition == partition_of(["a"], KEY, PARTITIONS)
    # A key absent at from_epoch has no version there; a deletion inside the range is one.
    assert versions(client.history(JOB, ["b"], from_epoch=3)) == [(4, None, 5)]
    assert versions(client.history(JOB, ["b"], from_epoch=1, to_epoch=3)) == [(1, 2, 1), (2, None, None)]
    # A version valid before the range is reported from the range's start.
    assert versions(client.history(JOB, ["c"], from_epoch=3, to_epoch=4)) == [(3, None, 1)]
    assert client.history(JOB, ["nobody"]).versions == ()
    for user in ("a", "b", "c"):
        history = client.history(JOB, [user])
        for epoch in range(6):
            value = history.value_at(epoch)
            assert (None if value is None else value["count"]) == model(epoch).get(user), (user, epoch)
        # Paged, one version per page: the same answer.
        assert client.history(JOB, [user], page_size=1) == history


def test_a_closed_range_answers_the_same_bytes_after_more_epochs(served: Served) -> None:
    request = pb.HistoryRequest(
        store=pb.StoreRef(job=JOB), key=pb.Row(fields=[pb.Value(string="a")]), from_epoch=1, to_epoch=4
    )
    before = served.client.stub.History(request).SerializeToString(deterministic=True)
    served.apply(6, {"a": 9})
    assert served.client.stub.History(request).SerializeToString(deterministic=True) == before
    assert versions(served.client.history(JOB, ["a"], from_epoch=5)) == [(6, None, 9)]


def expected_changes(epoch: int) -> list[tuple[str, str, int | None]]:
    return [
        (user, "delete" if count is None else "upsert", count)
        for user, count in sorted(EPOCHS[epoch].items())
    ]


def changes(feed: Any) -> list[tuple[int, list[tuple[str, str, int | None]]]]:
    return [
        (e.epoch, [(c.key["user"], c.type, None if c.value is None else c.value["count"]) for c in e.changes])
        for e in feed
    ]


def test_changes_come_epoch_by_epoch_complete_in_key_order_and_resume_at_any_epoch(served: Served) -> None:
    client = served.client
    everything = changes(client.changes(JOB, from_epoch=0))
    assert everything == [(e, expected_changes(e)) for e in range(6)]
    # Resuming after any whole epoch repeats and loses nothing; small pages change nothing.
    for start in range(6):
        assert changes(client.changes(JOB, from_epoch=start, page_size=1)) == everything[start:]
    assert changes(client.changes(JOB, from_epoch=1, to_epoch=2)) == everything[1:3]
    (epoch2,) = client.changes(JOB, from_epoch=2, to_epoch=2)
    (deleted, _) = epoch2.changes
    assert deleted.partition == partition_of(["b"], KEY, PARTITIONS)
    assert epoch2.committed_at_ms == committed_at(2) and epoch2.query_id == "q-1"
    # Every message of an epoch precedes its marker, which carries no changes.
    request = pb.ChangesRequest(store=pb.StoreRef(job=JOB), from_epoch=0, limit=1)
    messages = list(client.stub.Changes(request, timeout=5))
    assert [m.epoch for m in messages if m.epoch_complete] == list(range(6))
    assert all(not m.changes for m in messages if m.epoch_complete)
    assert [m.epoch for m in messages] == sorted(m.epoch for m in messages)


def test_changes_as_arrow_read_from_the_streams_bytes_equal_the_messages_read_as_declared(
    served: Served,
) -> None:
    """changes_batches_of reads each message's columns from its bytes (merged): the same
    batches as from the messages parsed as declared, one per epoch that changed something."""
    client = served.client
    batches = list(changes_batches_of(client, JOB, from_epoch=0, to_epoch=5, page_size=1))
    request = pb.ChangesRequest(store=pb.StoreRef(job=JOB), from_epoch=0, to_epoch=5, limit=1)
    store = client.describe(JOB).store()
    assert batches == list(epoch_batches(client.stub.Changes(request, timeout=5), lambda _: store))
    assert [int(b.schema.metadata[b"epochstate.epoch"]) for b in batches] == [0, 1, 2, 4, 5]
    for batch in batches:
        epoch = batch.column("epoch")[0].as_py()
        users = [k["user"] for k in batch.column("key").to_pylist()]
        counts = [v and v["count"] for v in batch.column("value").to_pylist()]
        kinds = batch.column("change_type").to_pylist()
        assert list(zip(users, kinds, counts, strict=True)) == expected_changes(epoch)
        assert batch.column("partition_id").to_pylist() == [partition_of([u], KEY, PARTITIONS) for u in users]


def test_a_followed_feed_sends_each_new_epoch_as_it_becomes_queryable(served: Served) -> None:
    feed = served.client.changes(JOB, from_epoch=5, follow=True)
    assert changes([next(feed)]) == [(5, expected_changes(5))]
    served.apply(6, {"d": 4})
    assert changes([next(feed)]) == [(6, [("d", "upsert", 4)])]
    served.apply(7, {"d": None})
    assert changes([next(feed)]) == [(7, [("d", "delete", None)])]
    feed.close()


def test_a_range_past_the_newest_epoch_waits_for_each_epoch_at_most_the_max_wait(served: Served) -> None:
    """Without a deadline a range's wait for each epoch ends after the daemon's max wait
    (a stream never waits for ever for an epoch that may never come); with one, it ends
    with its reason before the deadline."""
    feed = served.client.changes(JOB, from_epoch=5, to_epoch=7)  # no deadline
    assert changes([next(feed)]) == [(5, expected_changes(5))]
    served.apply(6, {"d": 4})  # within the wait: the stream goes on
    assert changes([next(feed)]) == [(6, [("d", "upsert", 4)])]
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded) as timed_out:
        next(feed)
    waited = time.monotonic() - started
    assert timed_out.value.reason == "EPOCH_WAIT_TIMED_OUT"
    assert f"waits at most {MAX_WAIT:g} s" in str(timed_out.value)
    assert MAX_WAIT * 0.9 <= waited < MAX_WAIT + 3
    with pytest.raises(DeadlineExceeded) as before_deadline:
        list(served.client.changes(JOB, from_epoch=7, to_epoch=7, timeout=0.5))
    assert before_deadline.value.reason == "EPOCH_WAIT_TIMED_OUT"


def test_ranges_before_retention_fail_with_the_queryable_range(served: Served) -> None:
    client = served.client
    served.retain_from(3)
    with pytest.raises(EpochRetired) as retired:
        list(client.changes(JOB, from_epoch=3))
    assert retired.value.reason == "EPOCH_RETIRED"
    assert (retired.value.metadata["oldestEpoch"], retired.value.metadata["newestEpoch"]) == ("4", "5")
    assert changes(client.changes(JOB, from_epoch=4)) == [(e, expected_changes(e)) for e in (4, 5)]
    with pytest.raises(EpochRetired):
        client.history(JOB, ["a"], from_epoch=2)
    assert versions(client.history(JOB, ["a"], from_epoch=3)) == [(3, 4, 2), (4, 5, 2), (5, None, None)]


@pytest.mark.parametrize(
    ("request_fields", "reason"),
    [
        ({"from_epoch": -1}, "BAD_RANGE"),
        ({"from_epoch": 3, "to_epoch": 2}, "BAD_RANGE"),
        ({"from_epoch": 0, "limit": 10_001}, "BAD_REQUEST"),
        ({"from_epoch": 0, "limit": -1}, "BAD_REQUEST"),
    ],
)
def test_bad_ranges_and_limits_are_invalid_arguments(
    served: Served, request_fields: dict[str, Any], reason: str
) -> None:
    key = pb.Row(fields=[pb.Value(string="a")])
    calls: list[Callable[[], object]] = [
        lambda: served.client.stub.History(
            pb.HistoryRequest(store=pb.StoreRef(job=JOB), key=key, **request_fields), timeout=5
        ),
        lambda: list(
            served.client.stub.Changes(
                pb.ChangesRequest(store=pb.StoreRef(job=JOB), **request_fields), timeout=5
            )
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as failed:
            call()
        assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert from_rpc_error(failed.value).reason == reason
    with pytest.raises(InvalidArgument) as refused:
        list(served.client.changes(JOB, from_epoch=0, to_epoch=3, follow=True))
    assert refused.value.reason == "BAD_RANGE"


def test_as_of_time_reads_the_newest_epoch_committed_by_then(served: Served) -> None:
    client = served.client
    assert client.get(JOB, ["a"], as_of_time=committed_at(1) + 500).epoch == 1
    assert client.get(JOB, ["a"], as_of_time=committed_at(2)).epoch == 2
    with pytest.raises(NoSuchEpoch):
        client.get(JOB, ["a"], as_of_time=committed_at(0) - 1)
    # Not known until an epoch committed after it is queryable: the read waits.
    with pytest.raises(DeadlineExceeded):
        client.get(JOB, ["a"], as_of_time=committed_at(5), timeout=0.3)
    answered: list[int] = []
    reader = threading.Thread(
        target=lambda: answered.append(client.pinned_epoch(JOB, as_of_time=committed_at(5), timeout=5))
    )
    reader.start()
    served.apply(6, {"a": 3})
    reader.join()
    assert answered == [5]
    served.retain_from(3)
    with pytest.raises(EpochRetired):
        client.get(JOB, ["a"], as_of_time=committed_at(1))
