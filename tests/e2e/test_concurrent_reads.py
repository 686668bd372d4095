"""Reads during ingest, retention and a job drop: each answer equals Spark's reader
for its epoch, or is an explicit refusal.

The real daemon follows a real Spark checkpoint whose epochs commit one by one
while reader threads Get, MultiGet and Scan (paged) at exact epochs and at the
latest one; retention keeps four epochs, so epochs retire under the readers. Then
the checkpoint is recreated (another query of the same shape with other values),
so the daemon drops the job and ingests the new query from its epoch 0, still
under the readers. Every answer is compared with Spark's own reader for that
epoch, of the query the answer names (its query id: the old one's, or the new
one's); a refusal must be explicit (EPOCH_RETIRED, EPOCH_NOT_READY, and for a read
or a scan's page that began on the dropped query INCARNATION_CHANGED). 0 mismatches.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import (
    EpochNotReady,
    EpochRetired,
    EpochStateClient,
    EpochStateClientError,
    IncarnationChanged,
)
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_store
from tests.fixtures.streams import FileStream, copy_checkpoint

JOB = "cc"
USERS = 3000
READERS = 4
# {canon(key): (key, value)} per epoch, per query.
States = dict[int, dict[str, tuple[Any, Any]]]

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def totals(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return frame.groupBy("user").agg(F.count("*").alias("n"), F.max("amount").alias("top"))


def rows(batch: int, offset: int) -> list[dict[str, Any]]:
    return [{"user": (batch * 400 + i) % USERS, "amount": offset + batch * 10 + i} for i in range(800)]


def build(spark: Any, tmp: Path, name: str, batches: int, offset: int) -> tuple[Path, States]:
    """A checkpoint of ``batches`` epochs and what Spark's reader says of each."""
    stream = FileStream(
        spark, tmp / f"in-{name}", tmp / f"cp-{name}", totals, "user long, amount long", name=JOB
    )
    stream.start()
    try:
        for batch in range(batches):
            stream.feed(rows(batch, offset))
    finally:
        stream.stop()
    oracle = spark_store(spark, stream.checkpoint, range(batches))
    states = {e: {k: (key, value) for k, (key, value, _) in s.items()} for e, s in oracle.states.items()}
    return stream.checkpoint, states


def place(source: Path, target: Path, held: Path) -> list[Path]:
    """Copy ``source`` to ``target`` (atomically replacing it), holding back every commit
    but the first; the held commit files, in order."""
    fresh = target.with_name(target.name + ".new")
    copy_checkpoint(source, fresh)
    shutil.rmtree(held, ignore_errors=True)
    held.mkdir()
    out = []
    for commit in sorted(
        (fresh / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    ):
        if commit.name.isdigit() and int(commit.name) > 0:
            out.append(Path(shutil.move(str(commit), str(held / commit.name))))
    if target.exists():
        old = target.with_name(target.name + ".old")
        target.rename(old)
        fresh.rename(target)
        shutil.rmtree(old)
    else:
        fresh.rename(target)
    return out


class Readers:
    """Reader threads checking every answer against both queries' oracles."""

    def __init__(self, target: str, queries: list[States], query_ids: list[str]) -> None:
        self.target = target
        self.queries = queries
        self.query_ids = query_ids
        self.newest = 0  # the newest epoch committed so far (readers ask up to it)
        self.counts: Counter[str] = Counter()
        self.mismatches: list[str] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(READERS)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(60)

    def wait_reads(self, n: int, timeout: float = 120.0) -> None:
        """Until the readers have done ``n`` more reads: the test paces the checkpoint's
        commits by reads, not by time, so a busy machine overlaps as many of them."""
        target = self.reads() + n
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.reads() >= target:
                return
            time.sleep(0.02)
        raise AssertionError(f"readers did fewer than {n} reads in {timeout} s: {self.counts}")

    def reads(self) -> int:
        """How many reads were done (answered or refused)."""
        with self._lock:
            return sum(c for w, c in self.counts.items() if not w.startswith("answers of"))

    def _count(self, what: str, mismatch: str | None = None) -> None:
        with self._lock:
            self.counts[what] += 1
            if mismatch is not None:
                self.mismatches.append(mismatch)

    def _matches(self, epoch: int, answer: dict[str, tuple[Any, Any] | None], query_id: str) -> str:
        """Whether the Spark reader of the query named ``query_id`` says ``answer`` (canon
        key -> (key, value), None: absent) at ``epoch``: "A", "B", or "" for neither."""
        names = [
            name
            for name, states, known in zip("AB", self.queries, self.query_ids, strict=True)
            if known == query_id
            and (state := states.get(epoch)) is not None
            and all(state.get(k) == v for k, v in answer.items())
        ]
        return " or ".join(names)

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        with EpochStateClient(self.target, timeout=30) as client:
            while not self.stop.is_set():
                epoch = rng.randint(0, self.newest)
                kind = rng.choice(["get", "get", "multi_get", "scan", "latest"])
                try:
                    self._read(client, rng, kind, epoch)
                except EpochRetired:
                    self._count(f"{kind}: EPOCH_RETIRED")
                except EpochNotReady:
                    self._count(f"{kind}: EPOCH_NOT_READY")
                except IncarnationChanged:
                    self._count(f"{kind}: INCARNATION_CHANGED")
                except EpochStateClientError as error:
                    self._count(f"{kind}: unexpected", f"{kind} at epoch {epoch}: {error!r}")

    def _read(self, client: EpochStateClient, rng: random.Random, kind: str, epoch: int) -> None:
        if kind == "scan":
            scanned = list(client.scan(JOB, epoch=epoch, page_size=400))
            found = {canon(lk.key): (plain(lk.key), plain(lk.value)) for lk in scanned}
            answer: dict[str, tuple[Any, Any] | None] = dict(found)
            (query_id,) = {lk.query_id for lk in scanned} or {""}
            # A scan must return every key of the state, not only correct ones.
            complete = any(set(s.get(epoch, {"": None})) == set(found) for s in self.queries)
            source = self._matches(epoch, answer, query_id) if complete else ""
        else:
            users = [rng.randrange(USERS) for _ in range(20 if kind == "multi_get" else 1)]
            if kind == "multi_get":
                lookups = client.multi_get(JOB, [[u] for u in users], epoch=epoch)
            else:
                lookups = [client.get(JOB, [users[0]], epoch="latest" if kind == "latest" else epoch)]
            epoch = lookups[0].epoch
            answer = {canon(lk.key): (plain(lk.key), plain(lk.value)) if lk.found else None for lk in lookups}
            right_keys = [plain(lk.key) for lk in lookups] == [{"user": u} for u in users]
            source = self._matches(epoch, answer, lookups[0].query_id) if right_keys else ""
        mismatch = None if source else f"{kind} at epoch {epoch} matches no Spark reader: {answer}"
        self._count(f"{kind}: answered", mismatch)
        if source:
            self._count(f"answers of query {source}")


def test_reads_during_ingest_retention_and_a_job_drop_match_spark(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    source_a, states_a = build(spark, tmp_path, "a", 10, 0)
    source_b, states_b = build(spark, tmp_path, "b", 6, 1_000_000)
    checkpoint = tmp_path / "cp"
    held = place(source_a, checkpoint, tmp_path / "held-a")
    daemon = daemon_factory({JOB: str(checkpoint)}, extra_args=["--retention-epochs", "4"])
    daemon.wait_for_epoch(JOB, 0)
    query_ids = [json.loads((source / "metadata").read_text())["id"] for source in (source_a, source_b)]
    readers = Readers(daemon.target, [states_a, states_b], query_ids)
    readers.start()
    try:
        for commit in held:  # query A commits epoch after epoch
            readers.wait_reads(150)
            shutil.move(str(commit), str(checkpoint / "commits" / commit.name))
            readers.newest = int(commit.name)
        daemon.wait_for_epoch(JOB, 9)
        time.sleep(0.5)
        held = place(source_b, checkpoint, tmp_path / "held-b")  # recreated: query B, epochs from 0
        for commit in held:
            readers.wait_reads(200)
            shutil.move(str(commit), str(checkpoint / "commits" / commit.name))
            readers.newest = max(int(commit.name), 4)  # some of A's epochs, retired or gone
        query_b = query_ids[1]
        with daemon.client() as client:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                summary = client.jobs()[0]
                if summary.latest_epoch == 5 and summary.query_id == query_b:
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(f"query B was not ingested:\n{daemon.log_tail()}")
        readers.wait_reads(300)
    finally:
        readers.join()
    total = readers.reads()
    for what, count in sorted(readers.counts.items()):
        print(f"{what:28s} {count:6d}")
    print(f"{total} reads checked against Spark's reader, {len(readers.mismatches)} mismatches")
    assert not readers.mismatches, readers.mismatches[:10]
    answered = sum(c for w, c in readers.counts.items() if w.endswith("answered"))
    assert total >= 2000 and answered >= 1000
    assert readers.counts["answers of query A"] > 0 and readers.counts["answers of query B"] > 0
    assert readers.counts["get: EPOCH_RETIRED"] + readers.counts["scan: EPOCH_RETIRED"] > 0
    with daemon.client() as client:  # the new query is served in full
        for epoch in range(2, 6):
            got = {canon(lk.key): (plain(lk.key), plain(lk.value)) for lk in client.scan(JOB, epoch=epoch)}
            assert got == states_b[epoch]
