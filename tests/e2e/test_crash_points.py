"""A crash at every write of ingest, retention and a job drop: after restart, every
read answered before the crash gives the same answer or an explicit error.

A child process follows a real Spark checkpoint the way the daemon does
(``JobFollower``: each epoch's batch, then retention), then finds the checkpoint
recreated (another query with other data) and drops the job before ingesting the
new query. The child's RocksDB is wrapped so that its ``n``-th write ends the
process before it reaches RocksDB (``os._exit``: no clean-up, like a crash). The
test runs the child once without a crash (the reference: what each epoch reads),
then once per write ``n``, and after each crash reopens the store and reads
every epoch through the daemon's own read path (``epochs.resolve`` and a view):

* as the restarted daemon sees the store before it does anything (a reader
  holding the job as it was before the crash), and
* after the daemon's start-up (which drops the old query if the crash left it).

Each read must equal the reference for its query and epoch, or be refused with
an explicit status (retired, not ingested yet, its query replaced); an epoch the child had reported
ingested must never read as "not ingested" nor any key as absent.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from epochstate.daemon.ingest.follower import JobFollower
from epochstate.daemon.runtime import NoRegistry
from epochstate.daemon.server import epochs
from epochstate.daemon.store.catalog import Catalog, JobEntry
from epochstate.daemon.store.versioned import VersionedStore
from epochstate.v1 import epochstate_pb2 as pb
from tests.fixtures.streams import FileStream, copy_checkpoint

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

RETENTION = 3

CHILD = r"""
import hashlib, os, shutil, sys
from pathlib import Path
from epochstate.daemon.ingest.follower import JobFollower
from epochstate.daemon.runtime import NoRegistry
from epochstate.daemon.store.versioned import VersionedStore

store_path, checkpoint, recreated, crash_at, retention = sys.argv[1:]
crash_at = int(crash_at)

class CrashAt:
    # The store's RocksDB, ending the process at its crash_at-th write.
    def __init__(self, db):
        self._db, self._writes = db, 0
    def _write(self, name):
        real = getattr(self._db, name)
        def write(*args):
            self._writes += 1
            if self._writes == crash_at:
                sys.stdout.flush()
                os._exit(77)
            return real(*args)
        return write
    def __getattr__(self, name):
        if name in ("put", "delete", "delete_range", "write"):
            return self._write(name)
        return getattr(self._db, name)

store = VersionedStore(store_path)
store._db = CrashAt(store._db)
view = None

def digest(follower, epoch):
    ((_, handle),) = follower.entry.stores.items()
    rows = store.view().scan(handle.descriptor.store_id, epoch, b"", None, 10**6)
    return hashlib.sha256(b"".join(len(v.payload).to_bytes(4, "big") + v.payload for v in rows)).hexdigest()

def hold_commits(root):
    # All but the first commit, released one by one: the job commits epoch after epoch.
    commits = sorted((root / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    held = Path(store_path).parent / ("held-" + os.urandom(4).hex())
    held.mkdir()
    out = []
    for c in commits:
        if c.name.isdigit() and int(c.name) > 0:
            out.append(Path(shutil.move(str(c), str(held / c.name))))
    return out

def ingest(follower, phase, held):
    while True:
        while (stats := follower.step()) is not None:
            print(phase, stats.epoch, follower.progress.oldest, digest(follower, stats.epoch), flush=True)
        if not held:
            return
        shutil.move(str(held.pop(0)), checkpoint + "/commits/")

follower = JobFollower("job", checkpoint, store, NoRegistry(), int(retention))
ingest(follower, "A", hold_commits(Path(checkpoint)))
shutil.rmtree(checkpoint)
shutil.copytree(recreated, checkpoint)
held = hold_commits(Path(checkpoint))
print("recreated", flush=True)
assert follower.reopen_if_recreated()
ingest(follower, "B", held)
print("writes", store._db._writes, flush=True)
"""


def totals(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return frame.groupBy("user").agg(F.count("*").alias("n"), F.max("amount").alias("top"))


def rows(batch: int, offset: int) -> list[dict[str, Any]]:
    # Keys come and stay; a recreated query sees the same users with other amounts.
    return [{"user": (batch * 300 + i) % 1500, "amount": offset + batch * 10 + i} for i in range(600)]


def checkpoint(spark: Any, tmp: Path, name: str, batches: int, offset: int) -> Path:
    stream = FileStream(
        spark, tmp / f"in-{name}", tmp / f"cp-{name}", totals, "user long, amount long", name="job"
    )
    stream.start()
    try:
        for batch in range(batches):
            stream.feed(rows(batch, offset))
    finally:
        stream.stop()
    return stream.checkpoint


def run_child(tmp: Path, source_a: Path, source_b: Path, crash_at: int) -> list[str]:
    store, cp = tmp / "store", tmp / "cp"
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(cp, ignore_errors=True)
    copy_checkpoint(source_a, cp)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(store), str(cp), str(source_b), str(crash_at), str(RETENTION)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    expected = 77 if crash_at else 0
    assert done.returncode == expected, f"crash at {crash_at}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout.splitlines()


def read(store: VersionedStore, entry: JobEntry, epoch: int) -> str:
    """One exact read of ``epoch`` the way the server makes it: the digest of what it
    answers, or the name of the error it is refused with."""
    catalog = Catalog()
    catalog.put(entry)
    try:
        pinned = epochs.resolve(store, catalog, entry, pb.EpochSelector(exact=epoch), lambda: 0.0)
    except epochs.EpochError as error:
        return type(error).__name__
    ((_, handle),) = entry.stores.items()
    found = pinned.view.scan(handle.descriptor.store_id, pinned.epoch, b"", None, 10**6)
    return hashlib.sha256(b"".join(len(v.payload).to_bytes(4, "big") + v.payload for v in found)).hexdigest()


def check_restart(tmp: Path, lines: list[str], reference: dict[tuple[str, int], str]) -> dict[str, int]:
    """Reopen the crashed store; every epoch of both queries reads as the reference or is refused."""
    answered = {(f[0], int(f[1])) for f in (line.split() for line in lines) if f[0] in ("A", "B")}
    counts = {"same": 0, "refused": 0}

    def check(query_of_entry: str, entry: JobEntry) -> None:
        if not entry.stores:
            return  # nothing of this query is known yet: reads fail with STORE_NOT_FOUND
        for epoch in sorted({e for _, e in reference}):
            got = read(store, entry, epoch)
            if got == reference.get((query_of_entry, epoch)):
                counts["same"] += 1
                continue
            assert got in ("EpochRetired", "EpochNotReady", "IncarnationChanged"), (
                query_of_entry,
                epoch,
                got,
            )
            if (query_of_entry, epoch) in answered:
                # Answered before the crash: may since be retired (or its query dropped: the
                # checkpoint holds another one now), never "not yet".
                assert got in ("EpochRetired", "IncarnationChanged"), (query_of_entry, epoch, got)
            counts["refused"] += 1

    store = VersionedStore(tmp / "store")
    try:
        found = store.job("job")
        before = None
        if found is not None:  # a reader holding the job as the crash left it
            stores = {
                (desc.operator_id, desc.store_name): _handle(store, desc) for desc in store.stores("job")
            }
            before = JobEntry(found, stores=stores)
            check("A" if found.job_id == 1 else "B", before)  # ids are never given twice
        follower = JobFollower("job", str(tmp / "cp"), store, NoRegistry(), RETENTION)  # the daemon's start
        if before is not None and found is not None:
            check("A" if found.job_id == 1 else "B", before)  # start-up may have dropped it meanwhile
        check("B" if "recreated" in lines else "A", follower.entry)
    finally:
        store.close()
    return counts


def _handle(store: VersionedStore, descriptor: Any) -> Any:
    from epochstate.daemon.store.catalog import StoreHandle

    return StoreHandle.of(descriptor, store.shapes(descriptor))


def test_a_crash_at_any_write_keeps_every_answered_read(spark: Any, tmp_path: Path) -> None:
    source_a = checkpoint(spark, tmp_path, "a", 7, 0)
    source_b = checkpoint(spark, tmp_path, "b", 4, 100_000)
    lines = run_child(tmp_path, source_a, source_b, 0)
    writes = int(lines[-1].split()[1])
    reference = {(f[0], int(f[1])): f[3] for f in (line.split() for line in lines) if f[0] in ("A", "B")}
    assert {e for q, e in reference if q == "A"} == set(range(7)) and len(reference) == 11, reference
    assert len(set(reference.values())) == len(reference)  # every epoch reads differently
    totals = {"same": 0, "refused": 0}
    for crash_at in range(1, writes + 1):
        counts = check_restart(tmp_path, run_child(tmp_path, source_a, source_b, crash_at), reference)
        for key, value in counts.items():
            totals[key] += value
    print(
        f"{writes} crash points (every write of ingest, retention and the job drop); reads after restart: "
        f"{totals['same']} answered as before, {totals['refused']} refused explicitly, 0 wrong"
    )
    assert totals["same"] > 0 and totals["refused"] > 0
