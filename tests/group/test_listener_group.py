"""A Spark job registers itself with a group: real ZooKeeper, three real daemon
processes, a real local-mode streaming query with the EpochReporter attached.

- the listener's first report defines the job in the group, placed as the listener
  says; the leader assigns it; every replica ingests it; routed reads pinned to each
  epoch equal Spark's own state reader;
- each later epoch reaches every replica through the listener's push, far sooner
  than the daemons' poll of the checkpoint (the time is printed);
- a report naming the job with another checkpoint is refused (JOB_DEFINED) and
  changes nothing; the same report again is fine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.client import KazooClient

from epochstate.client.errors import error_info
from epochstate.client.routed import RoutedClient
from epochstate.core.partition_ranges import LAST_PARTITION
from epochstate.core.zookeeper.layout import Layout
from epochstate.daemon.group.assignments import read_assignment
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.spark_plugin import Placement, attach
from epochstate.v1 import epochstate_pb2 as pb
from tests.e2e.test_reads import SCHEMA, counts
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_store
from tests.fixtures.streams import FileStream
from tests.fixtures.zookeeper import eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

GROUP = "reports"
JOB = "orders"
LAYOUT = Layout()
NODES = ("n1", "n2", "n3")
WAIT = 120.0  # generous: a busy 2-core machine
POLL_SECONDS = 30.0  # the daemons' poll: only the push can make an epoch fresh sooner


def orders(batch: int) -> list[dict[str, Any]]:
    return [{"user": f"user-{(batch * 23 + i * 7) % 60}", "amount": batch * 100 + i} for i in range(30)]


def _newest(daemon: DaemonProcess) -> int:
    with daemon.client() as client:
        return {j.job: j.latest_epoch for j in client.jobs()}.get(JOB, -1)


def test_a_listener_defines_its_job_in_the_group_and_pushes_to_every_replica(
    spark: Any,
    tmp_path: Path,
    zk_connect: str,
    make_zk_client: Callable[..., KazooClient],
    daemon_factory: Callable[..., DaemonProcess],
) -> None:
    zk = make_zk_client()
    daemons = {
        node: daemon_factory(
            {},
            name=node,
            zookeeper=zk_connect,
            extra_args=["--group", GROUP, "--node", node, "--poll-interval", str(POLL_SECONDS)],
            env={"EPOCHSTATE_ZOOKEEPER_SESSION_TIMEOUT": "4"},
        )
        for node in NODES
    }
    members = LAYOUT.group_members(GROUP)
    assert eventually(lambda: zk.exists(members) is not None and len(zk.get_children(members)) == 3, WAIT)
    checkpoint = tmp_path / "cp" / JOB
    # The home daemon is n1; n2 and n3 stand in when it is down.
    targets = ",".join(daemons[n].target for n in NODES)
    reporter = attach(
        spark,
        targets,
        checkpoints={JOB: str(checkpoint)},
        placements={JOB: Placement(replicas=2, shards=2, partitions=2)},
    )
    stream = FileStream(spark, tmp_path / "in", checkpoint, counts, SCHEMA, name=JOB).start()
    latencies: list[float] = []
    try:
        stream.feed(orders(0))
        definitions = JobDefinitions(zk, LAYOUT, GROUP)
        assert eventually(lambda: JOB in definitions.list(), WAIT)
        definition, version = definitions.get(JOB)
        assert (definition.checkpoint, definition.replicas, definition.shards, definition.partitions) == (
            str(checkpoint),
            2,
            2,
            2,
        )

        def assigned() -> bool:
            assignment = read_assignment(zk, LAYOUT, GROUP)[0]
            return assignment is not None and JOB in assignment.jobs

        assert eventually(assigned, WAIT)
        # Two shards of two replicas over three daemons: every daemon holds one shard at least.
        for daemon in daemons.values():
            daemon.wait_for_epoch(JOB, 0, WAIT)

        # Each later epoch: from its commit (the commit file's time) to queryable on every replica.
        for batch in range(1, 6):
            stream.feed(orders(batch))
            epoch = stream.committed()[-1]
            committed_at = (checkpoint / "commits" / str(epoch)).stat().st_mtime
            waiting = set(NODES)
            deadline = time.monotonic() + WAIT
            while waiting and time.monotonic() < deadline:
                for node in sorted(waiting):
                    if _newest(daemons[node]) >= epoch:
                        waiting.discard(node)
                        latencies.append(time.time() - committed_at)
                time.sleep(0.02)
            assert not waiting, f"epoch {epoch} not on {waiting} within {WAIT}s"
            late = [round(t, 2) for t in latencies[-len(NODES) :] if t >= POLL_SECONDS / 2]
            # Which epoch came by the poll rather than by the push, and what the listener did.
            assert not late, (epoch, late, reporter.sent, reporter.pushed, reporter.refused, reporter.dropped)
        print(
            f"\ncommit -> queryable on each replica, pushed by the listener ({len(latencies)} samples): "
            f"median {sorted(latencies)[len(latencies) // 2]:.3f}s, max {max(latencies):.3f}s; "
            f"the daemons poll every {POLL_SECONDS:g}s"
        )
        assert max(latencies) < POLL_SECONDS / 2
        assert reporter.pushed >= 5 and reporter.refused == 0
    finally:
        stream.stop()
        spark.streams.removeListener(reporter)
        reporter.close()

    # Pinned routed reads equal Spark's own state reader, at every epoch.
    epochs = stream.committed()
    oracle = spark_store(spark, checkpoint, epochs)
    assert oracle.partitions() == {0, 1}
    with RoutedClient([daemons["n3"].target], timeout=30) as client:
        location = client.locate(JOB)
        assert [(s.first, s.last) for s in location.shards] == [(0, 0), (1, LAST_PARTITION)]
        assert {r.node for s in location.shards for r in s.replicas} == set(NODES)
        for epoch in epochs:
            state = oracle.states[epoch]
            found = client.multi_get(JOB, oracle.keys(), epoch=epoch)
            assert {r.epoch for r in found} == {epoch}
            assert {canon(r.key): plain(r.value) for r in found if r.found} == {
                k: v[1] for k, v in state.items()
            }
            keys = oracle.keys()  # a StoreOracle is no dict: its keys are a method's answer
            assert {canon(r.key) for r in found if not r.found} == {
                canon(k) for k in keys if canon(k) not in state
            }

    # Another checkpoint under the same name: refused with its reason, nothing changes.
    other = pb.ReportEpochRequest(job=JOB, epoch=99, checkpoint=str(tmp_path / "cp" / "another"))
    other.placement.replicas = 3
    for daemon in daemons.values():
        with daemon.client() as direct:
            with pytest.raises(grpc.RpcError) as refused:
                direct.stub.ReportEpoch(other, timeout=30)
            info = error_info(refused.value)
            assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
            assert info is not None and info.reason == "JOB_DEFINED"
            # The same definition again: fine (idempotent), the daemon says what it holds.
            same = pb.ReportEpochRequest(job=JOB, epoch=epochs[-1], checkpoint=str(checkpoint))
            same.placement.replicas = 3  # a report never changes a defined job, placement included
            answer = direct.stub.ReportEpoch(same, timeout=30)
            assert answer.ingested_epoch in (-1, epochs[-1])
    assert definitions.get(JOB) == (definition, version)
    for daemon in daemons.values():
        assert _newest(daemon) == epochs[-1]
