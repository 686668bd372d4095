"""The gRPC API under generated requests (hypothesis), against a real daemon on a real
Spark checkpoint.

Every call of ``EpochState`` and ``AlignmentAdmin`` gets requests built from any
values: keys of any shape and type (oversized and malformed ones too), any epoch
selector, store reference, limit and page token. The properties:

* every response is OK, or a status carrying one ``google.rpc.ErrorInfo`` of
  domain ``epochstate.dev`` whose reason is one of :mod:`epochstate.core.reasons`
  and travels with its documented code; never UNKNOWN or INTERNAL (an exception
  the daemon did not mean), never without a reason;
* every call ends within its deadline (a call that may wait ends with the
  daemon's own reason before it, or at the latest with the deadline itself);
* afterwards the daemon is still up and answers a known read byte for byte as
  before.

``FUZZ_GRPC_EXAMPLES`` sets the examples per test (CI: a few hundred in all;
``make fuzz-grpc``: more). Without it (``make pytest``) the examples are
derandomized, the same on every run, so the suite's verdict never depends on luck;
``make fuzz-grpc`` explores.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochstate.core import reasons
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream

EXAMPLES = int(os.environ.get("FUZZ_GRPC_EXAMPLES", "200"))
EXPLORING = "FUZZ_GRPC_EXAMPLES" in os.environ
DEADLINE = 2.0  # seconds, every call
JOB = "fuzzed"
INT64 = (-(2**63), 2**63 - 1)
INT32 = (-(2**31), 2**31 - 1)
SCHEMA = "user string, bucket int, day date, amount long"
IMPORTED_MS = int(time.time() * 1000)


def buffers(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return frame.groupBy("user", "bucket", "day").agg(F.count("*"), F.avg("amount"))


@dataclass
class Served:
    daemon: DaemonProcess
    channel: grpc.Channel
    stub: pb_grpc.EpochStateStub
    admin: pb_grpc.AlignmentAdminStub
    epochs: list[int]
    known: pb.GetRequest
    known_answer: bytes
    scratch: Path


@pytest.fixture(scope="module")
def served(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("grpc-fuzz")
    stream = FileStream(spark, root / "in", root / "cp", buffers, SCHEMA, name=JOB).start()
    # Starts while Spark runs the batches; its first use waits for it.
    daemon = DaemonProcess(root / "daemon", {JOB: str(root / "cp")}).start(wait=False)
    try:
        for batch in range(2):
            stream.feed(
                [
                    {
                        "user": f"u{i % 3}",
                        "bucket": i % 2,
                        "day": f"2024-01-0{1 + i % 2}",
                        "amount": batch * 10 + i,
                    }
                    for i in range(5)
                ]
            )
    except BaseException:
        daemon.stop()
        raise
    finally:
        stream.stop()
    try:
        epochs = stream.committed()
        daemon.wait_for_epoch(JOB, epochs[-1])
        channel = grpc.insecure_channel(daemon.target)
        stub = pb_grpc.EpochStateStub(channel)
        scanned = stub.Scan(
            pb.ScanRequest(store=pb.StoreRef(job=JOB), epoch=pb.EpochSelector(exact=epochs[-1])),
            timeout=DEADLINE,
        )
        known = pb.GetRequest(
            store=pb.StoreRef(job=JOB), key=scanned.records[0].key, epoch=pb.EpochSelector(exact=epochs[-1])
        )
        answer = stub.Get(known, timeout=DEADLINE).SerializeToString(deterministic=True)
        assert pb.GetResponse.FromString(answer).record.found, "the known key has state"
        yield Served(
            daemon,
            channel,
            stub,
            pb_grpc.AlignmentAdminStub(channel),
            epochs,
            known,
            answer,
            root / "scratch",
        )
        channel.close()
    finally:
        daemon.stop()


# -- strategies ---------------------------------------------------------------------

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
names = st.one_of(
    st.sampled_from([JOB, "", "nope", "default", "../x", "a/b", "\x00", "fuzzed\n", "x" * 5000]), texts
)
int64 = st.one_of(st.integers(*INT64), st.integers(-3, 10))
int32 = st.one_of(st.integers(*INT32), st.integers(-3, 10))

atoms = st.one_of(
    st.builds(lambda: pb.Value(null=True)),
    st.builds(lambda b: pb.Value(bool=b), st.booleans()),
    st.builds(lambda i: pb.Value(int=i), int64),
    st.builds(lambda f: pb.Value(float=f), st.floats(allow_nan=True, allow_infinity=True)),
    st.builds(
        lambda d: pb.Value(decimal=d),
        st.one_of(st.from_regex(r"-?[0-9]{0,40}(\.[0-9]{0,40})?(E-?[0-9]{1,5})?", fullmatch=True), texts),
    ),
    st.builds(lambda s: pb.Value(string=s), st.one_of(st.sampled_from(["u0", "u1", "u2"]), texts)),
    st.builds(lambda b: pb.Value(binary=b), st.binary(max_size=40)),
    st.builds(lambda d: pb.Value(date=d), int32),
    st.builds(lambda t: pb.Value(timestamp_micros=t), int64),
    st.builds(pb.Value),  # no kind at all
    st.just(pb.Value(string="k" * 70_000)),  # beyond the 64 KiB key limit
)
values = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.builds(lambda fs: pb.Value(struct=pb.Row(fields=fs)), st.lists(inner, max_size=4)),
        st.builds(lambda es: pb.Value(array=pb.Array(elements=es)), st.lists(inner, max_size=4)),
        st.builds(
            lambda kv: pb.Value(map=pb.Map(keys=[k for k, _ in kv], values=[v for _, v in kv])),
            st.lists(st.tuples(inner, inner), max_size=3),
        ),
        st.builds(lambda ks: pb.Value(map=pb.Map(keys=ks)), st.lists(inner, min_size=1, max_size=2)),
    ),
    max_leaves=12,
)
# Keys close to the key schema (string, int, date) get past the first checks more often.
near_keys = st.builds(
    lambda user, bucket, day, extra: pb.Row(fields=[user, bucket, day, *extra]),
    st.one_of(st.builds(lambda s: pb.Value(string=s), st.sampled_from(["u0", "u1", "u2", "zz"])), values),
    st.one_of(st.builds(lambda i: pb.Value(int=i), st.integers(-2, 2**31 + 1)), values),
    st.one_of(st.builds(lambda d: pb.Value(date=d), st.integers(19720, 19726)), values),
    st.lists(values, max_size=1),
)
any_rows = st.builds(lambda fs: pb.Row(fields=fs), st.lists(values, max_size=5))


def mostly(likely: st.SearchStrategy[Any], other: st.SearchStrategy[Any], percent: int = 70) -> Any:
    """``likely`` in about ``percent`` % of the examples, else ``other`` (``one_of``
    leaves the split to hypothesis, which favours its simplest branch)."""
    return st.integers(0, 99).flatmap(lambda roll: likely if roll < percent else other)


rows = mostly(near_keys, any_rows, 50)
store_refs = mostly(
    st.builds(lambda store: pb.StoreRef(job=JOB, store=store), st.sampled_from(["", "default"])),
    st.builds(
        pb.StoreRef,
        job=names,
        operator_id=st.one_of(st.just(0), int32),
        store=st.one_of(st.sampled_from(["", "default", "$timers", "left-keyToNumValues"]), texts),
        query_id=st.one_of(st.just(""), texts),
    ),
)
positions = st.builds(
    lambda offsets: pb.Position(offsets=offsets),
    st.lists(
        st.builds(pb.PartitionOffset, topic=texts, partition=int32, offset=int64),
        max_size=3,
    ),
)


@st.composite
def selectors(draw: st.DrawFn) -> pb.EpochSelector:
    kind = draw(
        st.sampled_from(
            ["exact", "exact", "latest", "none", "at_least", "covers", "aligned_with", "as_of_time"]
        )
    )
    wait = draw(st.booleans())
    if kind == "exact":
        return pb.EpochSelector(exact=draw(st.one_of(st.integers(-2, 6), int64)), wait=wait)
    if kind == "latest":
        return pb.EpochSelector(latest=draw(st.booleans()), wait=wait)
    if kind == "none":
        return pb.EpochSelector(wait=wait)
    if kind == "at_least":
        return pb.EpochSelector(at_least=draw(st.one_of(st.integers(-2, 6), int64)), wait=wait)
    if kind == "covers":
        return pb.EpochSelector(covers=draw(positions), wait=wait)
    if kind == "as_of_time":
        # Times around the epochs' commits (the module's workload commits within a minute
        # of its import), and anywhere: a time after the newest commit is waited for.
        near = st.integers(IMPORTED_MS - 120_000, IMPORTED_MS + 40_000)
        return pb.EpochSelector(as_of_time=draw(st.one_of(near, int64)), wait=wait)
    return pb.EpochSelector(
        aligned_with=pb.AlignedWith(job=draw(names), epoch=draw(int64), subject=draw(texts)), wait=wait
    )


# -- the property -------------------------------------------------------------------


# What the generated calls got: "OK", a reason, or "DEADLINE" (the caller's own).
OUTCOMES: Counter[str] = Counter()


def assert_answer(call: Callable[[], Any], started: float | None = None) -> None:
    """Run ``call``: OK, or a status with a documented reason (see the module docstring)."""
    started = time.monotonic() if started is None else started
    try:
        call()
        OUTCOMES["OK"] += 1
        return
    except grpc.RpcError as error:
        elapsed = time.monotonic() - started
        code = error.code()
        assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (code, error.details())
        status = rpc_status.from_call(cast(grpc.Call, error))
        if status is None:
            # Only the caller's own deadline may end a call without the daemon's reason.
            assert code == grpc.StatusCode.DEADLINE_EXCEEDED and elapsed >= DEADLINE * 0.9, (
                code,
                error.details(),
            )
            OUTCOMES["DEADLINE"] += 1
            return
        assert len(status.details) == 1, status
        info = error_details_pb2.ErrorInfo()
        assert status.details[0].Unpack(info), status
        assert info.domain == reasons.DOMAIN, info
        assert info.reason in reasons.REASONS and info.reason != reasons.INTERNAL, (info, error.details())
        assert reasons.REASONS[info.reason].code == code.name, (info.reason, code)
        OUTCOMES[info.reason] += 1
    assert time.monotonic() - started < DEADLINE + 1.0, "the call outlived its deadline"


def fuzz_settings() -> settings:
    return settings(
        max_examples=EXAMPLES,
        derandomize=not EXPLORING,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )


# -- the calls ----------------------------------------------------------------------


@fuzz_settings()
@given(ref=store_refs, key=rows, selector=selectors())
def test_get(served: Served, ref: pb.StoreRef, key: pb.Row, selector: pb.EpochSelector) -> None:
    request = pb.GetRequest(store=ref, key=key, epoch=selector)
    assert_answer(lambda: served.stub.Get(request, timeout=DEADLINE))


@fuzz_settings()
@given(
    ref=store_refs,
    keys=st.one_of(st.lists(rows, max_size=6), st.just([pb.Row()] * 10_001)),
    selector=selectors(),
)
def test_multi_get(served: Served, ref: pb.StoreRef, keys: list[pb.Row], selector: pb.EpochSelector) -> None:
    request = pb.MultiGetRequest(store=ref, keys=keys, epoch=selector)
    assert_answer(lambda: served.stub.MultiGet(request, timeout=DEADLINE))


@fuzz_settings()
@given(
    ref=store_refs,
    selector=selectors(),
    prefix=st.one_of(st.builds(pb.Row), rows),
    start=st.one_of(st.none(), rows),
    end=st.one_of(st.none(), rows),
    limit=st.one_of(st.integers(-2, 3), st.sampled_from([10_000, 10_001]), int32),
    token=st.one_of(
        st.just(b""),
        st.binary(max_size=24),
        st.builds(
            lambda epoch, rest: epoch.to_bytes(8, "big", signed=True) + rest, int64, st.binary(max_size=16)
        ),
        # The page token's own shape: format 2, epoch, query id (length-prefixed), last key.
        st.builds(
            lambda epoch, length, query, rest: (
                b"\x02" + epoch.to_bytes(8, "big", signed=True) + bytes([length]) + query + rest
            ),
            int64,
            st.integers(0, 255),
            st.binary(max_size=40),
            st.binary(max_size=16),
        ),
    ),
)
def test_scan(
    served: Served,
    ref: pb.StoreRef,
    selector: pb.EpochSelector,
    prefix: pb.Row,
    start: pb.Row | None,
    end: pb.Row | None,
    limit: int,
    token: bytes,
) -> None:
    request = pb.ScanRequest(store=ref, epoch=selector, prefix=prefix, limit=limit, page_token=token)
    if start is not None:
        request.start.CopyFrom(start)
    if end is not None:
        request.end.CopyFrom(end)
    assert_answer(lambda: served.stub.Scan(request, timeout=DEADLINE))


@fuzz_settings()
@given(
    ref=store_refs,
    key=rows,
    from_epoch=st.one_of(st.integers(-2, 4), int64),
    to_epoch=st.one_of(st.none(), st.integers(-2, 4), int64),
    wait=mostly(st.just(False), st.just(True), 90),
    follow=st.booleans(),
    limit=st.one_of(st.integers(-2, 3), st.sampled_from([10_000, 10_001]), int32),
)
def test_history_and_changes(
    served: Served,
    ref: pb.StoreRef,
    key: pb.Row,
    from_epoch: int,
    to_epoch: int | None,
    wait: bool,
    follow: bool,
    limit: int,
) -> None:
    history = pb.HistoryRequest(store=ref, key=key, from_epoch=from_epoch, wait=wait, limit=limit)
    changes = pb.ChangesRequest(store=ref, from_epoch=from_epoch, follow=follow, limit=limit)
    if to_epoch is not None:
        history.to_epoch = to_epoch
        changes.to_epoch = to_epoch
    assert_answer(lambda: served.stub.History(history, timeout=DEADLINE))

    def first_messages() -> None:
        stream = served.stub.Changes(changes, timeout=0.2)
        try:
            for _ in zip(range(8), stream, strict=False):
                pass
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:  # a stream that waits for new epochs
                raise
        finally:
            stream.cancel()  # type: ignore[no-untyped-call]

    assert_answer(first_messages)


@fuzz_settings()
@given(
    job=mostly(st.just(JOB), names),
    from_epoch=int64,
    limit=int32,
    after=st.one_of(st.none(), st.integers(-2, 4), int64),
    watch=mostly(st.just(True), st.just(False), 25),
)
def test_discovery(
    served: Served, job: str, from_epoch: int, limit: int, after: int | None, watch: bool
) -> None:
    assert_answer(lambda: served.stub.ListJobs(pb.ListJobsRequest(), timeout=DEADLINE))
    assert_answer(lambda: served.stub.DescribeJob(pb.DescribeJobRequest(job=job), timeout=DEADLINE))
    request = pb.ListEpochsRequest(job=job, from_epoch=from_epoch, limit=limit)
    assert_answer(lambda: served.stub.ListEpochs(request, timeout=DEADLINE))
    if not watch:  # a quarter of the examples watch: a watch of new epochs waits out its deadline
        return
    watching = pb.WatchEpochsRequest(job=job)
    if after is not None:
        watching.after_epoch = after

    def first_epochs() -> None:
        stream = served.stub.WatchEpochs(watching, timeout=0.1)
        try:
            for _ in zip(range(3), stream, strict=False):
                pass
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:  # a stream that waits for new epochs
                raise
        finally:
            stream.cancel()  # type: ignore[no-untyped-call]

    assert_answer(first_epochs)


@fuzz_settings()
@given(
    job=names,
    epoch=int64,
    checkpoint=st.one_of(
        st.sampled_from(["", "\x00", "relative/dir", "nope://x/y", "file:", "file:///\x00", ":::", "s3a://"]),
        texts,
    ),
    missing=st.booleans(),
)
def test_reports_and_follow(served: Served, job: str, epoch: int, checkpoint: str, missing: bool) -> None:
    if missing:  # a local directory that does not exist (yet)
        checkpoint = str(served.scratch / "missing" / checkpoint.replace("\x00", "").replace("/", "_")[:50])
    report = pb.ReportEpochRequest(job=job, epoch=epoch, checkpoint=checkpoint)
    assert_answer(lambda: served.stub.ReportEpoch(report, timeout=DEADLINE))
    follow = pb.FollowJobRequest(job=job, checkpoint=checkpoint)
    assert_answer(lambda: served.stub.FollowJob(follow, timeout=DEADLINE))


@fuzz_settings()
@given(subject=names, job=names, keep=st.integers(0, 2**32 - 1), epoch=int64, wait=st.floats(-1, 0.5))
def test_alignment_admin(served: Served, subject: str, job: str, keep: int, epoch: int, wait: float) -> None:
    admin = served.admin
    assert_answer(
        lambda: admin.Status(pb.AlignmentStatusRequest(subject=subject, keep=keep), timeout=DEADLINE)
    )
    command = pb.AlignmentCommandRequest(subject=subject, job=job, wait_seconds=wait)
    assert_answer(lambda: admin.CatchUp(command, timeout=DEADLINE))
    assert_answer(lambda: admin.Abort(command, timeout=DEADLINE))
    align = pb.AlignRequest(subject=subject, job=job, epoch=epoch, wait_seconds=wait)
    assert_answer(lambda: admin.Align(align, timeout=DEADLINE))
    prune = pb.PruneSubjectRequest(subject=subject, keep=keep, dry_run=True)
    assert_answer(lambda: admin.Prune(prune, timeout=DEADLINE))


@pytest.mark.parametrize("checkpoint", ["\x00", "missing"])
def test_following_an_unreadable_checkpoint_is_a_bad_request(served: Served, checkpoint: str) -> None:
    """A finding of the generated requests: FollowJob of a checkpoint that cannot be
    read was INTERNAL (the daemon's fault); it is the request's."""
    where = checkpoint if checkpoint != "missing" else str(served.scratch / "never-written")
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.FollowJob(pb.FollowJobRequest(job="elsewhere", checkpoint=where), timeout=DEADLINE)
    status = rpc_status.from_call(cast(grpc.Call, caught.value))
    info = error_details_pb2.ErrorInfo()
    assert status is not None and status.details[0].Unpack(info)
    assert (caught.value.code(), info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reasons.BAD_REQUEST)
    assert "cannot follow job 'elsewhere'" in (caught.value.details() or "")


METHODS = [
    (f"/{service.full_name}/{method.name}", method.server_streaming)
    for service in pb.DESCRIPTOR.services_by_name.values()
    for method in service.methods
]


@fuzz_settings()
@given(method=st.sampled_from(METHODS), payload=st.binary(max_size=64))
def test_any_bytes(served: Served, method: tuple[str, bool], payload: bytes) -> None:
    """Bytes as the request of any method: parsed (protobuf takes most bytes as some
    message), or refused as BAD_REQUEST, never gRPC's own INTERNAL."""
    path, streaming = method
    if streaming:
        stream = served.channel.unary_stream(path, None, None)(payload, timeout=0.1)

        def some() -> None:
            try:
                for _ in zip(range(3), stream, strict=False):
                    pass
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise
            finally:
                stream.cancel()  # type: ignore[no-untyped-call]

        assert_answer(some)
        return
    assert_answer(lambda: served.channel.unary_unary(path, None, None)(payload, timeout=DEADLINE))


def test_undecodable_requests_are_bad_requests(served: Served) -> None:
    """A finding of the generated requests: bytes that do not parse as the request
    message ended in gRPC's own INTERNAL, without a reason."""
    for path in ("/epochstate.v1.EpochState/Get", "/epochstate.v1.AlignmentAdmin/Status"):
        with pytest.raises(grpc.RpcError) as caught:
            served.channel.unary_unary(path, None, None)(b"\xff\xff\xff", timeout=DEADLINE)
        status = rpc_status.from_call(cast(grpc.Call, caught.value))
        info = error_details_pb2.ErrorInfo()
        assert status is not None and status.details[0].Unpack(info)
        assert (caught.value.code(), info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reasons.BAD_REQUEST)
        assert "does not parse as epochstate.v1." in (caught.value.details() or "")


def test_the_daemon_is_up_and_answers_as_before(served: Served) -> None:
    """Runs after the generated requests (pytest keeps file order): the daemon is up,
    answers the known read as before, and the requests reached past the first checks
    (reads that succeeded, keys refused for their shape, epochs not there)."""
    print(f"outcomes of the generated calls: {dict(OUTCOMES.most_common())}")
    if sum(OUTCOMES.values()) >= 7 * EXAMPLES:  # the whole module ran
        for outcome in ("OK", reasons.BAD_KEY, reasons.JOB_NOT_FOUND, reasons.BAD_REQUEST):
            assert OUTCOMES[outcome] > 0, (outcome, OUTCOMES)
    assert served.daemon.process is not None and served.daemon.process.poll() is None, (
        served.daemon.log_tail()
    )
    again = served.stub.Get(served.known, timeout=DEADLINE).SerializeToString(deterministic=True)
    assert again == served.known_answer
    log = served.daemon.log_path.read_text(errors="replace")
    assert "Traceback" not in log, served.daemon.log_tail(80)
