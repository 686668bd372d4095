"""A grpc-js client (Node.js), with nothing but the shipped ``epochstate.proto``, against
a real daemon: Get pinned to an epoch and by ``as_of_time``, History, and the Changes
stream with its end-of-epoch markers (tests/e2e/grpcjs/over_time.js). Every message it
receives must be the message the Python stub receives, and decode to the Python
client's answer; a refused range must carry its reason in the status details.

Here rather than under tests/e2e because this folder's ``window`` workload (made once
per test session) has removals, so deletions, and keys of many Spark types.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

import epochstate.v1
from epochstate.client.client import Lookup
from epochstate.client.over_time import versions_of, whole_epochs
from epochstate.client.values import from_row
from epochstate.v1 import epochstate_pb2 as pb
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.grpcjs import grpcjs_modules, run_node
from tests.sources.conftest import BATCHES

pytestmark = pytest.mark.spark

SCRIPT = Path(__file__).parents[1] / "e2e" / "grpcjs" / "over_time.js"
PROTO = Path(epochstate.v1.__file__).with_name("epochstate.proto")
JOB = "window"
EPOCH = 1
LIMIT = 500  # several messages for the epochs that change most

M = TypeVar("M", bound=Message)


def parsed(answer: dict[str, Any], kind: type[M]) -> M:
    """A message as grpc-js printed it, parsed back (unknown fields refused)."""
    return json_format.ParseDict(answer, kind())


def test_a_grpcjs_client_reads_over_time_as_the_python_client(
    checkpoints: dict[str, Path], daemon_factory: Callable[..., DaemonProcess]
) -> None:
    grpcjs_modules()  # the first install on a machine takes a while: before the daemon starts
    daemon = daemon_factory({JOB: str(checkpoints[JOB])})
    # The query's last epoch (after its input's, a batch the watermark alone may run).
    last = max(int(p.name) for p in (checkpoints[JOB] / "commits").iterdir() if p.name.isdigit())
    assert last >= BATCHES - 1
    daemon.wait_for_epoch(JOB, last)
    with daemon.client() as client:
        shape = client.describe(JOB).store()
        stub, store = client.stub, pb.StoreRef(job=JOB)
        request = pb.ChangesRequest(store=store, from_epoch=0, to_epoch=last, limit=LIMIT)
        feed = list(stub.Changes(request, timeout=10))
        # Keys with every kind of history: the first and the last each epoch changed.
        rows: list[pb.Row] = []
        for message in feed:
            if message.changes:
                rows += [message.changes[0].record.key, message.changes[-1].record.key]
        rows = list({r.SerializeToString(deterministic=True): r for r in rows}.values())
        committed = {e.epoch: e.committed_at_ms for e in client.epochs(JOB)}
        answers = run_node(
            SCRIPT,
            {
                "proto": str(PROTO),
                "target": daemon.target,
                "job": JOB,
                "epoch": EPOCH,
                "keys": [json_format.MessageToDict(r, preserving_proto_field_name=True) for r in rows],
                "as_of_time": str(committed[EPOCH]),
                "from_epoch": 0,
                "to_epoch": last,
                "limit": LIMIT,
            },
        )

        def schemas(epoch: int) -> tuple[Any, Any]:
            return shape.key, shape.value

        for row, got_get, got_history in zip(rows, answers["get"], answers["history"], strict=True):
            get = parsed(got_get, pb.GetResponse)
            assert get == stub.Get(pb.GetRequest(store=store, key=row, epoch=pb.EpochSelector(exact=EPOCH)))
            key = from_row(row, shape.key)
            record = get.record
            assert client.get(JOB, key, epoch=EPOCH) == Lookup(
                get.epoch,
                from_row(record.key, shape.key),
                record.found,
                from_row(record.value, shape.value) if record.found else None,
                record.partition if record.found else None,
                get.query_id,
            )
            history = parsed(got_history, pb.HistoryResponse)
            asked = pb.HistoryRequest(store=store, key=row, from_epoch=0, to_epoch=last)
            assert history == stub.History(asked)
            ours = client.history(JOB, key, from_epoch=0, to_epoch=last)
            assert versions_of(history, schemas) == list(ours.versions) and ours.versions

        latest = parsed(answers["history_latest"], pb.HistoryResponse)
        assert latest.to_epoch == last
        assert latest == stub.History(pb.HistoryRequest(store=store, key=rows[0], from_epoch=0))
        as_of = parsed(answers["as_of_time"], pb.GetResponse)
        newest_by_then = max(e for e, at in committed.items() if at <= committed[EPOCH])
        first = from_row(rows[0], shape.key)
        assert as_of == stub.Get(
            pb.GetRequest(store=store, key=rows[0], epoch=pb.EpochSelector(as_of_time=committed[EPOCH]))
        )
        assert as_of.epoch == newest_by_then == client.get(JOB, first, as_of_time=committed[EPOCH]).epoch

        # The stream: the same messages, each epoch ended by its marker (no changes, its
        # commit time), deletions included; whole epochs as the Python client has them.
        changes = answers["changes"]
        assert (changes["code"], changes["reason"]) == (0, "")
        messages = [parsed(m, pb.ChangesResponse) for m in changes["messages"]]
        assert messages == feed
        markers = [m for m in messages if m.epoch_complete]
        assert [(m.epoch, m.committed_at_ms, len(m.changes)) for m in markers] == [
            (e, committed[e], 0) for e in range(last + 1)
        ]
        assert max(Counter(m.epoch for m in messages).values()) > 2  # an epoch of several messages
        assert any(c.type == pb.Change.DELETE for m in messages for c in m.changes)
        assert list(whole_epochs(messages, lambda _: schemas)) == list(
            client.changes(JOB, from_epoch=0, to_epoch=last)
        )

    # grpc-js reads the reason from the status details (grpc-status-details-bin).
    assert answers["bad_range"] == {"messages": [], "code": 3, "reason": "BAD_RANGE"}
