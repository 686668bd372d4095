"""A checkpoint recreated under a running daemon: answers never move to the other query.

Real Spark writes two checkpoints of the same shape with other values (query A, then
query B, each with its own stable query id). The real daemon, registered in a real
ZooKeeper, serves query A; then the checkpoint is replaced by query B, whose epochs
restart at 0 and commit one by one while reader threads keep reading:

* readers pinned to A's query id get A's answers (equal to Spark's reader of A) or
  FAILED_PRECONDITION (INCARNATION_CHANGED) naming A's and B's query ids; answered
  wrongly: 0;
* unpinned readers get answers that carry a query id and equal Spark's reader of the
  query that id names; wrong: 0;
* a Scan paged across the recreation and a WatchEpochs stream end with the same
  refusal;
* ZooKeeper ends with B's epochs only, each record naming B's query id, the job znode
  naming B (and A as retired), the daemon's replica naming B;
* restarted, the daemon behaves the same.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from epochstate.client import EpochStateClient, EpochStateClientError, IncarnationChanged
from tests.e2e.test_concurrent_reads import JOB, USERS, States, build, place
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain
from tests.fixtures.streams import copy_checkpoint
from tests.fixtures.zookeeper import eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

READERS = 2  # of each kind


def query_of(checkpoint: Path) -> str:
    return str(json.loads((checkpoint / "metadata").read_text())["id"])


def read(
    client: EpochStateClient, rng: random.Random, epoch: int, query_id: str | None
) -> tuple[str, str, dict[str, Any]]:
    """One read of a random kind at ``epoch``: (the kind, the query id that answered,
    canon key -> (key, value), or None for an absent key)."""
    kind = rng.choice(["get", "multi_get", "scan"])
    if kind == "scan":
        found = list(client.scan(JOB, epoch=epoch, page_size=700, query_id=query_id))
        queries = {lk.query_id for lk in found}
        answer: dict[str, Any] = {canon(lk.key): (plain(lk.key), plain(lk.value)) for lk in found}
        return kind, (queries.pop() if len(queries) == 1 else f"one scan, queries {queries}"), answer
    users = [rng.randrange(USERS) for _ in range(10 if kind == "multi_get" else 1)]
    if kind == "get":
        lookups = [client.get(JOB, [users[0]], epoch=epoch, query_id=query_id)]
    else:
        lookups = client.multi_get(JOB, [[u] for u in users], epoch=epoch, query_id=query_id)
    if [plain(lk.key) for lk in lookups] != [{"user": u} for u in users]:
        return kind, "other keys", {}
    queries = {lk.query_id for lk in lookups}
    return (
        kind,
        (queries.pop() if len(queries) == 1 else f"one read, queries {queries}"),
        {canon(lk.key): (plain(lk.key), plain(lk.value)) if lk.found else None for lk in lookups},
    )


def agrees(states: States, epoch: int, answer: dict[str, Any], scan: bool) -> bool:
    state = states.get(epoch)
    if state is None:
        return False
    if scan and set(answer) != set(state):
        return False
    return all(state.get(k) == v for k, v in answer.items())


class Readers:
    """Threads reading A's epochs pinned to A's query id, and unpinned ones; every answer checked."""

    def __init__(self, target: str, queries: dict[str, States], pinned: str) -> None:
        self.target, self.queries, self.pinned = target, queries, pinned
        self.newest = 4
        self.counts: Counter[str] = Counter()
        self.wrong: list[str] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(i, i % 2 == 0), daemon=True) for i in range(2 * READERS)
        ]

    def reads(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def wait_reads(self, n: int) -> None:
        target = self.reads() + n
        assert eventually(lambda: self.reads() >= target, 180), self.counts

    def _count(self, what: str, wrong: str | None = None) -> None:
        with self._lock:
            self.counts[what] += 1
            if wrong:
                self.wrong.append(wrong)

    def _run(self, seed: int, pinned: bool) -> None:
        rng = random.Random(seed)
        kind = "pinned" if pinned else "unpinned"
        with EpochStateClient(self.target, timeout=30) as client:
            while not self.stop.is_set():
                epoch = rng.randint(0, self.newest)
                try:
                    kind_read, query_id, answer = read(client, rng, epoch, self.pinned if pinned else None)
                except IncarnationChanged as refused:
                    ok = refused.requested_query_id == self.pinned and self.pinned in str(refused)
                    self._count(f"{kind}: INCARNATION_CHANGED", None if ok or not pinned else repr(refused))
                    continue
                except EpochStateClientError as error:  # not ready, retired: explicit, never an answer
                    self._count(f"{kind}: {error.reason or error.code.name}")
                    continue
                good = (not pinned or query_id == self.pinned) and query_id in self.queries
                good = good and agrees(self.queries[query_id], epoch, answer, kind_read == "scan")
                self._count(
                    f"{kind}: answered", None if good else f"{kind} epoch {epoch} {query_id}: {answer}"
                )

    def __enter__(self) -> Readers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(60)


def zookeeper_state(zk: KazooClient) -> tuple[str, list[str], dict[int, str], str] | None:
    """(the job znode's query, its retired queries, epoch -> its record's query, the replica's
    query); None while the job is not registered."""
    try:
        return _zookeeper_state(zk)
    except NoNodeError:
        return None


def _zookeeper_state(zk: KazooClient) -> tuple[str, list[str], dict[int, str], str]:
    job = json.loads(zk.get(f"/epochstate/jobs/{JOB}")[0])
    epochs_path = f"/epochstate/jobs/{JOB}/epochs"
    epochs = {
        int(n): json.loads(zk.get(f"{epochs_path}/{n}")[0])["query_id"] for n in zk.get_children(epochs_path)
    }
    replica_path = f"/epochstate/jobs/{JOB}/replicas/node-a"
    replica = json.loads(zk.get(replica_path)[0]).get("query_id", "") if zk.exists(replica_path) else ""
    return job["query_id"], job.get("retired_query_ids", []), epochs, replica


def check_after(daemon: DaemonProcess, zk: KazooClient, qa: str, b: tuple[str, States]) -> None:
    """What must hold once B is ingested: A refused everywhere, B served, ZooKeeper on B."""
    qb, states_b = b
    wrong = 0
    with daemon.client(timeout=30) as client:
        assert client.jobs()[0].query_id == qb
        rng = random.Random(7)
        for epoch in range(5):
            for _ in range(3):
                try:
                    read(client, rng, epoch, qa)
                    wrong += 1
                except IncarnationChanged as refused:
                    assert (refused.requested_query_id, refused.current_query_id) == (qa, qb)
                    assert qa in str(refused) and qb in str(refused)
        for epoch in range(4):
            found = list(client.scan(JOB, epoch=epoch))
            assert {lk.query_id for lk in found} == {qb}
            assert {canon(lk.key): (plain(lk.key), plain(lk.value)) for lk in found} == states_b[epoch]
            assert [lk.query_id for lk in client.multi_get(JOB, [[1], [2]], epoch=epoch, query_id=qb)] == [
                qb,
                qb,
            ]
        assert {e.query_id for e in client.epochs(JOB)} == {qb}
    assert wrong == 0, f"{wrong} reads pinned to query A answered after the recreation"
    expected = (qb, [qa], dict.fromkeys(range(4), qb), qb)
    assert eventually(lambda: zookeeper_state(zk) == expected, 30), (zookeeper_state(zk), expected)


def test_a_recreated_checkpoint_never_answers_for_the_old_query(
    spark: Any,
    tmp_path: Path,
    daemon_factory: Callable[..., DaemonProcess],
    zk_connect: str,
    zk_client: KazooClient,
) -> None:
    source_a, states_a = build(spark, tmp_path, "a", 5, 0)
    checkpoint = tmp_path / "cp"
    copy_checkpoint(source_a, checkpoint)
    # The daemon starts and ingests A while Spark builds B.
    daemon = daemon_factory(
        {JOB: str(checkpoint)}, zookeeper=zk_connect, extra_args=["--node", "node-a"], wait=False
    )
    source_b, states_b = build(spark, tmp_path, "b", 4, 1_000_000)
    qa, qb = query_of(source_a), query_of(source_b)
    assert qa != qb
    daemon.wait_for_epoch(JOB, 4)
    assert eventually(lambda: zookeeper_state(zk_client) == (qa, [], dict.fromkeys(range(5), qa), qa), 30)

    with daemon.client(timeout=30) as client:
        for epoch in range(5):  # the answers A gives, each naming A
            found = list(client.scan(JOB, epoch=epoch, query_id=qa))
            assert {lk.query_id for lk in found} == {qa}
            assert {canon(lk.key): (plain(lk.key), plain(lk.value)) for lk in found} == states_a[epoch]
        paged = client.scan(JOB, epoch=2, page_size=100)  # a scan whose later pages come after
        assert next(paged).query_id == qa
        watch = client.watch(JOB, after_epoch=0)
        watched = [next(watch) for _ in range(4)]
        assert [(e.epoch, e.query_id) for e in watched] == [(e, qa) for e in range(1, 5)]

        with Readers(daemon.target, {qa: states_a, qb: states_b}, qa) as readers:
            readers.wait_reads(100)
            for commit in place(source_b, checkpoint, tmp_path / "held-b"):  # recreated: B from epoch 0
                readers.wait_reads(60)
                shutil.move(str(commit), str(checkpoint / "commits" / commit.name))
            daemon.wait_for_epoch(JOB, 3)
            assert eventually(lambda: client.jobs()[0].query_id == qb, 60)
            readers.wait_reads(150)
        for what, count in sorted(readers.counts.items()):
            print(f"{what:36s} {count:6d}")
        print(f"{readers.reads()} reads, {len(readers.wrong)} answered wrongly")
        assert not readers.wrong, readers.wrong[:5]
        assert readers.counts["pinned: INCARNATION_CHANGED"] > 0 and readers.counts["unpinned: answered"] > 0

        with pytest.raises(IncarnationChanged) as paged_refusal:
            list(paged)
        assert paged_refusal.value.requested_query_id == qa
        with pytest.raises(IncarnationChanged) as watch_refusal:
            list(watch)
        assert watch_refusal.value.requested_query_id == qa

    check_after(daemon, zk_client, qa, (qb, states_b))
    daemon.stop()  # restarted, it behaves the same
    daemon.start()
    daemon.wait_for_epoch(JOB, 3)
    check_after(daemon, zk_client, qa, (qb, states_b))
