"""Get's fast path for a key at an exact epoch answers exactly as the general path.

A Get of one key and a MultiGet of that key answer with the same bytes (the two
responses share their field numbers); MultiGet always takes the general path, Get
takes the fast one whenever it applies. So for every case, success or failure, the
two calls must end alike: the same bytes, or the same status code, message and
trailers (the reason and metadata travel in ``grpc-status-details-bin``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from epochstate.core.partitioner import partition_of
from epochstate.core.sparktypes import AtomicType, StructField, StructType, type_to_json
from epochstate.daemon.codec.keycodec import encode_fields
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.server.handlers import add_to_server
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.service import EpochStateService
from epochstate.daemon.store.catalog import Catalog, JobEntry, StoreHandle
from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.versioned import VersionedStore
from epochstate.v1 import epochstate_pb2 as pb

KEY = StructType((StructField("user", AtomicType("string")),))
VALUE = StructType((StructField("count", AtomicType("long")),))
PARTITIONS = 2
JOB = "orders"
# epoch -> user -> count (None: removed); epoch 0 is retired, epoch 3 cannot be served.
EPOCHS: dict[int, dict[str, int | None]] = {
    0: {"a": 1},
    1: {"a": 2, "b": 1},
    2: {"b": None},
    3: {"a": 3},
    4: {},
}


class _NoIngest:
    def follow(self, job: str, checkpoint: str) -> JobEntry:
        raise AssertionError("not called")

    def poke(self, job: str, epoch: int | None = None, run_id: str = "", query_id: str = "") -> None:
        pass


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[grpc.Channel]:
    store = VersionedStore(Path(tmp_path_factory.mktemp("exact-get")) / "db")
    job = store.add_job(JOB, "/cp", "q-1", "hdfs")
    schema = (json.dumps(type_to_json(KEY)), json.dumps(type_to_json(VALUE)))
    descriptor = store.add_store(JOB, 0, "stateStoreSave", "default", PARTITIONS, *schema)
    later = store.add_store(JOB, 1, "stateStoreSave", "default", PARTITIONS, *schema)
    catalog = Catalog()
    stores = {
        (0, "default"): StoreHandle.of(descriptor),
        (1, "default"): StoreHandle.of(replace(later, first_epoch=2)),
    }
    catalog.put(JobEntry(job, stores=stores, unavailable={3: "its state could not be read"}, committed=5))
    encoder = RecordEncoder(KEY, VALUE)
    for epoch, changes in EPOCHS.items():
        encoded = {
            encode_fields([user]): None
            if count is None
            else encoder.present(partition_of([user], KEY, PARTITIONS), (user,), (count,))
            for user, count in changes.items()
        }
        record = EpochRecord(epoch, 1000 * epoch, 1000 * epoch, 0)
        result = store.apply_epoch(job, epoch, {descriptor.store_id: encoded}, record, fresh=epoch == 0)
        catalog.advance(JOB, result.progress)
    store.apply_retention(job, 1)
    catalog.advance(JOB, store.progress(job.job_id))
    service = EpochStateService(store, catalog, _NoIngest(), max_wait=1.0)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add_to_server(service, server, DaemonMetrics())
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as opened:
            yield opened
    finally:
        catalog.close()
        server.stop(None)
        service.close()
        store.close()


def _key(*values: pb.Value) -> pb.Row:
    return pb.Row(fields=list(values))


A = _key(pb.Value(string="a"))
CASES: dict[str, tuple[pb.StoreRef, pb.Row, pb.EpochSelector]] = {
    "present": (pb.StoreRef(job=JOB), A, pb.EpochSelector(exact=1)),
    "present, newest": (pb.StoreRef(job=JOB), A, pb.EpochSelector(exact=4)),
    "present, waiting": (pb.StoreRef(job=JOB), A, pb.EpochSelector(exact=1, wait=True)),
    "removed": (pb.StoreRef(job=JOB), _key(pb.Value(string="b")), pb.EpochSelector(exact=2)),
    "never present": (pb.StoreRef(job=JOB), _key(pb.Value(string="zz")), pb.EpochSelector(exact=1)),
    "store named": (pb.StoreRef(job=JOB, store="default"), A, pb.EpochSelector(exact=1)),
    "query id": (pb.StoreRef(job=JOB, query_id="q-1"), A, pb.EpochSelector(exact=1)),
    "another query id": (pb.StoreRef(job=JOB, query_id="q-0"), A, pb.EpochSelector(exact=1)),
    "unknown job": (pb.StoreRef(job="nope"), A, pb.EpochSelector(exact=1)),
    "no job": (pb.StoreRef(), A, pb.EpochSelector(exact=1)),
    "unknown store": (pb.StoreRef(job=JOB, operator_id=7), A, pb.EpochSelector(exact=1)),
    "store before its first epoch": (pb.StoreRef(job=JOB, operator_id=1), A, pb.EpochSelector(exact=1)),
    "retired": (pb.StoreRef(job=JOB), A, pb.EpochSelector(exact=0)),
    "unavailable": (pb.StoreRef(job=JOB), A, pb.EpochSelector(exact=3)),
    "committed, not ingested": (pb.StoreRef(job=JOB), A, pb.EpochSelector(exact=5)),
    "not committed": (pb.StoreRef(job=JOB), A, pb.EpochSelector(exact=9)),
    "negative": (pb.StoreRef(job=JOB), A, pb.EpochSelector(exact=-1)),
    "latest": (pb.StoreRef(job=JOB), A, pb.EpochSelector(latest=True)),
    "at least": (pb.StoreRef(job=JOB), A, pb.EpochSelector(at_least=2)),
    "bad key": (pb.StoreRef(job=JOB), _key(pb.Value(int=1)), pb.EpochSelector(exact=1)),
    "wrong shape": (
        pb.StoreRef(job=JOB),
        _key(pb.Value(string="a"), pb.Value(int=1)),
        pb.EpochSelector(exact=1),
    ),
    "no key": (pb.StoreRef(job=JOB), _key(), pb.EpochSelector(exact=1)),
    "key too long": (pb.StoreRef(job=JOB), _key(pb.Value(string="x" * 70_000)), pb.EpochSelector(exact=1)),
    "bad key, retired": (pb.StoreRef(job=JOB), _key(pb.Value(int=1)), pb.EpochSelector(exact=0)),
}


def _outcome(channel: grpc.Channel, method: str, request: bytes) -> tuple[Any, ...]:
    call = channel.unary_unary(f"/epochstate.v1.EpochState/{method}", None, None)
    try:
        return ("answer", call(request, timeout=10))
    except grpc.RpcError as error:
        return ("error", error.code(), error.details(), tuple(error.trailing_metadata() or ()))


@pytest.mark.parametrize("case", CASES)
def test_get_answers_as_multiget(channel: grpc.Channel, case: str) -> None:
    ref, key, selector = CASES[case]
    get = _outcome(channel, "Get", pb.GetRequest(store=ref, key=key, epoch=selector).SerializeToString())
    multi = _outcome(
        channel, "MultiGet", pb.MultiGetRequest(store=ref, keys=[key], epoch=selector).SerializeToString()
    )
    assert get == multi
    assert get[0] == "answer" or any(name == "grpc-status-details-bin" for name, _ in get[3])
