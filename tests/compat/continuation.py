"""A release's checkpoints continued by the pin: the user upgraded Spark and restarted
the same query on the same checkpoint.

Per release, once per test session, on checkpoints the release's workload already
made (``runner``), no workload of its own: a daemon follows them (it ingests the
release's epochs), then the pin runs :data:`CONTINUED_BATCHES` more batches of the
same query and set-up in this test session's Spark, in place (the file source's log
names the input files by their paths), while the daemon follows live. The pin's
reader then dumps every epoch, the release's and its own. The release's other
tests compare only the release's epochs, so they are unaffected by the epochs added.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochstate.devtools.local_daemon import LocalDaemon
from tests.compat.releases import READER_OF_LAST_RESORT, SparkRelease
from tests.compat.runner import ReleaseRunner, Say, StoreDump
from tests.compat.workload.jobs import Job, feed
from tests.compat.workload.oracle import dump_job
from tests.compat.workload.queries import BATCHES, CONTINUED_BATCHES, QUERIES, SETUPS

# Per store provider, one query (the ones with the most kinds of stores): what a
# user's continued checkpoint may hold, at the least Spark time.
CONTINUED_JOBS = ("hdfs-aggregation", "rocksdb-changelog-join", "rocksdb-snapshots-tws")
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"


@dataclass
class Continuation:
    """A release's checkpoints after the pin continued them."""

    release: SparkRelease
    jobs: dict[str, dict[str, Any]]  # as in ``result.json``, ``committed`` now the release's and the pin's
    live: LocalDaemon  # followed them from the release's epochs on, across the upgrade
    stores: list[StoreDump] = field(default_factory=list)  # the pin's reader at every epoch
    unreadable: dict[str, str] = field(default_factory=dict)


class Continuations:
    """Continues each release's checkpoints on first request; stops their daemons on :meth:`close`."""

    def __init__(self, runner: ReleaseRunner, spark: Any, say: Say) -> None:
        self.runner, self.spark, self.say = runner, spark, say
        self._done: dict[str, Continuation] = {}

    def get(self, release: SparkRelease) -> Continuation:
        if release.name not in self._done:
            self._done[release.name] = self._continue(release)
        return self._done[release.name]

    def close(self) -> None:
        for continuation in self._done.values():
            continuation.live.stop()

    def _continue(self, release: SparkRelease) -> Continuation:
        run = self.runner.get(release)
        run.require()
        jobs = {name: dict(job) for name, job in run.jobs.items() if name in CONTINUED_JOBS}
        live = LocalDaemon(
            run.out.with_name(f"{release.name}-continued-daemon"),
            {name: job["checkpoint"] for name, job in jobs.items()},
        ).start()
        continuation = Continuation(release, jobs, live)
        try:
            for name in jobs:
                live.wait_for_epoch(name, BATCHES - 1, timeout=120)
            started = time.monotonic()
            self._run_pin(run.out, jobs)
            self.say(
                f"{release}: {len(jobs)} checkpoints continued by pyspark {READER_OF_LAST_RESORT.pyspark} "
                f"in {time.monotonic() - started:.0f} s"
            )
            for name, job in jobs.items():
                job["committed"] = _committed(Path(job["checkpoint"]))
                live.wait_for_epoch(name, job["committed"][-1], timeout=120)
            self._dump(continuation)
        except BaseException:
            live.stop()
            raise
        return continuation

    def _run_pin(self, out: Path, jobs: dict[str, dict[str, Any]]) -> None:
        session = self.spark.newSession()
        session.conf.set(NO_DATA_BATCHES, "false")  # one epoch per batch, as the workload ran them
        setups = {s.name: s for s in SETUPS}
        queries = {q.name: q for q in QUERIES}
        running = [Job(session, out, setups[j["setup"]], queries[j["query"]]) for j in jobs.values()]
        for job in running:
            job.start()
        try:
            for batch in range(BATCHES, BATCHES + CONTINUED_BATCHES):
                for inputs in {job.inputs for job in running}:
                    feed(inputs, batch)
                for job in running:
                    job.catch_up()
        finally:
            for job in running:
                job.stream.stop()

    def _dump(self, continuation: Continuation) -> None:
        pin = READER_OF_LAST_RESORT.pyspark
        for name, job in continuation.jobs.items():
            dumped = dump_job(self.spark, job)
            if "error" in dumped:
                continuation.unreadable[name] = dumped["error"]
                continue
            for store in dumped["stores"]:
                where = f"{name} {store['operator_id']}/{store['store']}"
                if "error" in store:
                    continuation.unreadable[where] = store["error"]
                    continue
                epochs = {int(e): rows for e, rows in store["epochs"].items()}
                continuation.stores.append(
                    StoreDump(name, store["operator_id"], store["store"], store["kind"], epochs, pin, None)
                )


def _committed(checkpoint: Path) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
