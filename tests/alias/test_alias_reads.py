"""Reads of an alias across a hot-swap: the real servicer over gRPC, the real ZooKeeper.

Two jobs read input subject ``in`` aligned and write output subject ``out``: the
old job's batch ``j`` read input epoch ``j``, the new job (started later) its
batch ``j`` input epoch ``j + 2``. Their epochs are written to a temporary store
as ingest writes them, each job's count of ``a`` telling them apart; the swap
moves through its states in ZooKeeper as the sinks move it
(:class:`~epochstate.core.swap.registry.SwapRegistry`). Against Spark's
checkpoints, see ``tests/sources/test_alias_checkpoints.py``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient
from typer.testing import CliRunner

from epochstate.cli.app import app
from epochstate.client import (
    AmbiguousName,
    EpochNotReady,
    EpochStateClient,
    InvalidArgument,
    JobNotFound,
    NoSuchEpoch,
    Unavailable,
)
from epochstate.core.alias import errors
from epochstate.core.alias.records import AliasRecord
from epochstate.core.alias.registry import AliasRegistry
from epochstate.core.partitioner import partition_of
from epochstate.core.sparktypes import AtomicType, StructField, StructType, type_to_json
from epochstate.core.swap.records import SwapRecord
from epochstate.core.swap.registry import SwapRegistry
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.subject_records import SubjectEpochRecord, SubjectSourceRecord
from epochstate.daemon.codec.keycodec import encode_fields
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.aliases import Aliases
from epochstate.daemon.server.aligned import SubjectAlignment
from epochstate.daemon.server.handlers import add_to_server
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.service import EpochStateService
from epochstate.daemon.store.catalog import Catalog, JobEntry, StoreHandle
from epochstate.daemon.store.descriptors import EpochRecord, JobDescriptor
from epochstate.daemon.store.versioned import VersionedStore
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1.epochstate_pb2_grpc import EpochStateStub
from tests.fixtures.zookeeper import eventually

KEY = StructType((StructField("user", AtomicType("string")),))
VALUE = StructType((StructField("count", AtomicType("long")),))
PARTITIONS = 2
IN, OUT, ALIAS = "in", "out", "orders"
OLD, NEW = "counts-v1", "counts-v2"
# The input epoch each job's batch 0 read.
STARTED_AT = {OLD: 0, NEW: 2}
SWAP_EPOCH = 5
LAYOUT = Layout()


def count(job: str, input_epoch: int) -> int:
    """The count of ``a`` after a job's batch reading ``input_epoch``: which job it is shows."""
    return input_epoch * 10 + (0 if job == OLD else 1)


class _NoIngest:
    def follow(self, job: str, checkpoint: str) -> JobEntry:
        raise AssertionError("not called")

    def poke(self, job: str, epoch: int | None = None, run_id: str = "", query_id: str = "") -> None:
        pass


@dataclass
class Served:
    store: VersionedStore
    catalog: Catalog
    jobs: dict[str, tuple[JobDescriptor, int]]
    zk: KazooClient
    client: EpochStateClient
    stub: EpochStateStub
    swaps: SwapRegistry
    target: str

    def ingest(self, job: str, input_epochs: range) -> None:
        """The job's batches reading ``input_epochs``: recorded in its mapping, then ingested."""
        descriptor, store_id = self.jobs[job]
        batches = {k - STARTED_AT[job]: k for k in input_epochs}
        write_source(self.zk, job, batches)
        encoder = RecordEncoder(KEY, VALUE)
        for batch, k in batches.items():
            key = encode_fields(["a"])
            payload = encoder.present(partition_of(["a"], KEY, PARTITIONS), ("a",), (count(job, k),))
            record = EpochRecord(batch, batch + 1, batch + 1, 0)
            result = self.store.apply_epoch(
                descriptor, batch, {store_id: {key: payload}}, record, fresh=batch == 0
            )
            self.catalog.advance(job, result.progress)

    def get(self, epoch: pb.EpochSelector, name: str = ALIAS, timeout: float = 5.0) -> pb.GetResponse:
        request = pb.GetRequest(
            store=pb.StoreRef(job=name), key=pb.Row(fields=[pb.Value(string="a")]), epoch=epoch
        )
        return self.stub.Get(request, timeout=timeout)

    def swap(self, change: str) -> SwapRecord:
        now = int(time.time() * 1000)
        if change == "plan":
            planned = SwapRecord(1, OUT, IN, OLD, NEW, SWAP_EPOCH, "planned", now, now + 600_000)
            return self.swaps.create(OUT, lambda current: planned)
        if change == "prepare":
            return self.swaps.update(OUT, lambda r: r.with_prepared(OLD, now).with_prepared(NEW, now))
        if change == "commit":
            return self.swaps.update(OUT, lambda r: r.with_committed(NEW, SWAP_EPOCH - 1, now))
        assert change == "done"
        return self.swaps.update(OUT, lambda r: r.with_done(SWAP_EPOCH, now))


def write_source(client: KazooClient, job: str, mapping: dict[int, int]) -> None:
    path = LAYOUT.subject_source(IN, job)
    if client.exists(path):
        old = SubjectSourceRecord.decode(client.get(path)[0])
        client.set(path, SubjectSourceRecord("aligned", {**old.mapping, **mapping}, 1).encode())
    else:
        client.create(path, SubjectSourceRecord("aligned", mapping, 1).encode(), makepath=True)


def exact(epoch: int, wait: bool = False) -> pb.EpochSelector:
    return pb.EpochSelector(exact=epoch, wait=wait)


def answer(response: pb.GetResponse) -> tuple[int, str, int, int]:
    """(alias epoch, job, job epoch, count) of an alias read."""
    return response.epoch, response.job, response.job_epoch, response.record.value.fields[0].int


@pytest.fixture
def served(tmp_path: Path, zk_client: KazooClient) -> Iterator[Served]:
    store = VersionedStore(tmp_path / "db")
    catalog = Catalog()
    jobs = {}
    schema = (json.dumps(type_to_json(KEY)), json.dumps(type_to_json(VALUE)))
    for name in (OLD, NEW):
        descriptor = store.add_job(name, f"/cp/{name}", f"q-{name}", "hdfs")
        handle = store.add_store(name, 0, "agg", "default", PARTITIONS, *schema)
        catalog.put(JobEntry(descriptor, stores={(0, "default"): StoreHandle.of(handle)}))
        jobs[name] = (descriptor, handle.store_id)
    view = SubjectView(zk_client)
    aliases = AliasRegistry(zk_client)
    service = EpochStateService(
        store,
        catalog,
        _NoIngest(),
        SubjectAlignment(view, catalog),
        max_wait=1.0,
        aliases=Aliases(aliases, view, catalog),
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    add_to_server(service, server, DaemonMetrics())
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    client = EpochStateClient(f"127.0.0.1:{port}", timeout=5)
    aliases.define(AliasRecord(ALIAS, OLD, OUT, IN))
    try:
        stub, swaps = EpochStateStub(channel), SwapRegistry(zk_client)
        yield Served(store, catalog, jobs, zk_client, client, stub, swaps, f"127.0.0.1:{port}")
    finally:
        client.close()
        channel.close()
        view.close()
        catalog.close()
        server.stop(None)
        service.close()
        store.close()


def test_an_alias_answers_from_the_old_job_up_to_the_swap_epoch_and_from_the_new_one_after_it(
    served: Served,
) -> None:
    served.ingest(OLD, range(0, 4))
    served.ingest(NEW, range(2, 4))
    before = {k: answer(served.get(exact(k))) for k in range(4)}
    assert before == {k: (k, OLD, k, count(OLD, k)) for k in range(4)}
    assert answer(served.get(pb.EpochSelector(latest=True)))[:3] == (3, OLD, 3)

    served.swap("plan")
    served.ingest(OLD, range(4, 8))  # the old job runs on past the swap epoch, writing nothing
    served.ingest(NEW, range(4, 8))
    assert answer(served.get(exact(SWAP_EPOCH))) == (5, OLD, 5, count(OLD, 5))
    # Undecided: no job answers epoch 6 yet, and latest stops at the swap epoch.
    with pytest.raises(grpc.RpcError) as refused:
        served.get(exact(6))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "not decided yet" in str(refused.value.details())
    with pytest.raises(EpochNotReady, match="not decided yet"):
        served.client.get(ALIAS, ["a"], epoch=6)
    assert answer(served.get(pb.EpochSelector(latest=True)))[:2] == (5, OLD)

    # A read of epoch 6 that waits is answered by the new job once the swap commits.
    waited: list[pb.GetResponse] = []
    reader = threading.Thread(target=lambda: waited.append(served.get(exact(6, wait=True), timeout=30)))
    reader.start()
    served.swap("prepare")
    with pytest.raises(EpochNotReady, match="prepared: not decided yet"):
        served.client.get(ALIAS, ["a"], epoch=6)
    served.swap("commit")
    reader.join(30)
    assert [answer(r) for r in waited] == [(6, NEW, 4, count(NEW, 6))]
    assert answer(served.get(pb.EpochSelector(latest=True))) == (7, NEW, 5, count(NEW, 7))

    served.swap("done")
    after = {k: answer(served.get(exact(k))) for k in range(8)}
    assert {k: after[k] for k in range(4)} == before  # pinned answers never change
    assert after == {
        k: (
            k,
            OLD if k <= SWAP_EPOCH else NEW,
            k - (0 if k <= SWAP_EPOCH else 2),
            count(OLD if k <= SWAP_EPOCH else NEW, k),
        )
        for k in range(8)
    }
    # The Python client decodes each answer with its own job's schemas.
    looked = [served.client.get(ALIAS, ["a"], epoch=k) for k in (5, 6)]
    assert [(lk.epoch, lk.job, lk.value) for lk in looked] == [(5, OLD, (50,)), (6, NEW, (61,))]
    # And the CLI says which job answered.
    target = ["--target", served.target]
    printed = CliRunner().invoke(app, ["get", ALIAS, '["a"]', "--epoch", "6", "--json", *target])
    assert printed.exit_code == 0, printed.output
    assert {k: json.loads(printed.output)[k] for k in ("epoch", "answered_by", "value")} == {
        "epoch": 6,
        "answered_by": NEW,
        "value": {"count": 61},
    }
    printed = CliRunner().invoke(app, ["epochs", ALIAS, "--from", "5", "--limit", "2", "--json", *target])
    listed = json.loads(printed.output)
    assert [(e["epoch"], e["answered_by"], e["job_epoch"]) for e in listed] == [(5, OLD, 5), (6, NEW, 4)]


def test_describe_and_list_epochs_say_which_job_answers_which_epochs(served: Served) -> None:
    served.ingest(OLD, range(0, 8))
    served.ingest(NEW, range(2, 8))
    served.swap("plan")
    pending = served.client.describe(ALIAS, refresh=True)
    assert (pending.job, pending.latest_epoch) == (ALIAS, SWAP_EPOCH)
    info = served.stub.DescribeJob(pb.DescribeJobRequest(job=ALIAS)).alias
    assert (info.subject, info.input, info.undecided_after, info.pending_swap) == (OUT, IN, SWAP_EPOCH, 1)
    assert [j.job for j in info.jobs] == [OLD]

    for change in ("prepare", "commit", "done"):
        served.swap(change)
    info = served.stub.DescribeJob(pb.DescribeJobRequest(job=ALIAS)).alias
    assert not info.HasField("undecided_after")
    assert [
        (j.job, j.HasField("from_epoch") and j.from_epoch, j.HasField("to_epoch") and j.to_epoch, j.swap)
        for j in info.jobs
    ] == [(OLD, False, SWAP_EPOCH, 0), (NEW, SWAP_EPOCH + 1, False, 1)]
    listed = served.client.epochs(ALIAS)
    assert [(e.epoch, e.job, e.job_epoch) for e in listed] == [
        (k, OLD, k) if k <= SWAP_EPOCH else (k, NEW, k - 2) for k in range(8)
    ]
    assert [e.epoch for e in served.client.epochs(ALIAS, from_epoch=4, limit=3)] == [4, 5, 6]
    assert served.client.describe(ALIAS, refresh=True).latest_epoch == 7


def test_aligned_with_an_alias_follows_the_output_across_the_handover(served: Served) -> None:
    served.ingest(OLD, range(0, 8))
    served.ingest(NEW, range(2, 8))
    for change in ("plan", "prepare", "commit", "done"):
        served.swap(change)
    # The output: the old job's batches 0..5 wrote output epochs 0..5, the new job the
    # next ones; a downstream job read output epoch m in its batch m + 100.
    for output in range(8):
        writer = OLD if output <= SWAP_EPOCH else NEW
        served.zk.create(
            LAYOUT.subject_epoch(OUT, output),
            SubjectEpochRecord({0: (output, output + 1)}, writer, None, 1).encode(),
            makepath=True,
        )
    served.zk.create(
        LAYOUT.subject_source(OUT, "enrich"),
        SubjectSourceRecord("aligned", {m + 100: m for m in range(8)}, 1).encode(),
        makepath=True,
    )
    by_output = {
        m: answer(served.get(pb.EpochSelector(aligned_with=pb.AlignedWith(job="enrich", epoch=m + 100))))
        for m in range(8)
    }
    assert by_output == {m: answer(served.get(exact(m))) for m in range(8)}
    # Through the input: the new job's batch 1 read input epoch 3, which the old job answers.
    through_input = served.get(pb.EpochSelector(aligned_with=pb.AlignedWith(job=NEW, epoch=1)))
    assert answer(through_input) == (3, OLD, 3, count(OLD, 3))

    # A job's read aligned with an alias epoch: the epoch of the job answering it.
    of_new = served.get(pb.EpochSelector(aligned_with=pb.AlignedWith(job=ALIAS, epoch=3)), name=NEW)
    assert (of_new.epoch, of_new.job, of_new.record.value.fields[0].int) == (1, "", count(NEW, 3))

    # The old job's own reads aligned with the downstream job: its epochs up to the handover;
    # an output epoch the new job wrote was produced by no epoch of the old job.
    def enrich(m: int) -> pb.EpochSelector:
        return pb.EpochSelector(aligned_with=pb.AlignedWith(job="enrich", epoch=m + 100))

    assert served.get(enrich(3), name=OLD).epoch == 3
    with pytest.raises(NoSuchEpoch, match="written by job 'counts-v2', not by job 'counts-v1'"):
        served.client.get(OLD, ["a"], aligned_with=("enrich", 107))


def _refused_as_ambiguous(served: Served, name: str) -> bool:
    """Whether a read of ``name`` is refused as ambiguous (else: what the job alone answers)."""
    try:
        served.client.get(name, ["a"])
    except AmbiguousName:
        return True
    except EpochNotReady:  # the job alone: it has no epoch
        return False
    raise AssertionError(f"{name!r} answered as a job with epochs")


def test_names_resolve_to_one_job_or_alias_and_calls_not_offered_on_aliases_say_so(
    served: Served, zk_client: KazooClient
) -> None:
    served.ingest(OLD, range(0, 3))
    with pytest.raises(JobNotFound):
        served.client.get("nobody", ["a"])
    with pytest.raises(InvalidArgument, match="History is not offered on alias 'orders'"):
        served.client.history(ALIAS, ["a"])
    # A name that is both a followed job and an alias is refused, not guessed, once the
    # daemon's watch on the aliases saw the definition (it arrives after define returns).
    AliasRegistry(zk_client).define(AliasRecord(NEW, OLD, OUT, IN))
    assert eventually(lambda: _refused_as_ambiguous(served, NEW), timeout=10), (
        "the alias never reached the daemon"
    )
    with pytest.raises(AmbiguousName):
        served.client.get(NEW, ["a"])
    with pytest.raises(AmbiguousName):
        served.client.describe(NEW, refresh=True)
    assert served.client.describe(ALIAS, refresh=True).job == ALIAS

    # Without ZooKeeper, reads of jobs go on, an alias is unavailable (retry), and a name
    # that was no alias stays an unknown job.
    zk_client.stop()
    assert served.client.get(OLD, ["a"], epoch=2).value == (count(OLD, 2),)
    with pytest.raises(Unavailable):
        served.client.get(ALIAS, ["a"], epoch=2, timeout=0.5)  # retried until then
    with pytest.raises(JobNotFound):
        served.client.get("nobody", ["a"])
    zk_client.start(timeout=15)

    # Defining an alias under the name of a job registered in ZooKeeper is refused.
    zk_client.create(LAYOUT.job("registered"), b"{}", makepath=True)
    with pytest.raises(errors.AmbiguousName):
        AliasRegistry(zk_client).define(AliasRecord("registered", OLD, OUT, IN))
