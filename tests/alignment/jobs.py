"""The chained jobs of the exactly-once test, runnable in a process of their own to be SIGKILLed.

The SparkSession of a test session is shared, and a query stopped in-process
runs its shutdown path; a crash is only real when the driver's whole process
group dies mid-batch. So each job can run as::

    python -m tests.alignment.jobs upstream   --checkpoint C --topic T --bootstrap B --zookeeper Z --input D
    python -m tests.alignment.jobs downstream --checkpoint C --topic T --bootstrap B --zookeeper Z --job J

in a small local[1] JVM (512 MiB), and :class:`JobProcess` starts and kills such a
process. The query builders are shared with the in-process reference job.

    python -m tests.alignment.jobs relay      --checkpoint C --topic T --bootstrap B --zookeeper Z --job J
                                              --output O --version v1 [--shadow]

upstream: JSON files ``{"id": ...}`` (one file per batch) -> the aligned sink, two write tasks.
downstream: the subject, aligned -> count per id (the state the test checks).
relay: the subject, aligned -> one JSON record per id (``OUTPUTS[version]``) -> subject ``output``
through the aligned sink, as job ``job`` (the old or new job of a hot-swap).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.devtools.python_workers import worker_python
from epochstate.devtools.spark_session import local_session

FORMAT = "epochstate-kafka"
TRIGGER = "200 milliseconds"


@dataclass(frozen=True)
class Wiring:
    """Where a job's pieces are: its checkpoint, the subject, the broker and ZooKeeper."""

    checkpoint: Path
    topic: str
    bootstrap: str
    zookeeper: str

    def arguments(self) -> list[str]:
        return [
            "--checkpoint", str(self.checkpoint), "--topic", self.topic,
            "--bootstrap", self.bootstrap, "--zookeeper", self.zookeeper,
        ]  # fmt: skip


def start_upstream(spark: Any, wiring: Wiring, inputs: Path, job: str = "upstream") -> Any:
    """Each input file becomes one batch and so one subject epoch of ``wiring.topic``."""
    frame = (
        spark.readStream.format("json")
        .schema("id string")
        .option("maxFilesPerTrigger", 1)
        .load(str(inputs))
        .repartition(2)
        .selectExpr("id AS key", "id AS value")
    )
    return (
        frame.writeStream.format(FORMAT)
        .queryName(job)
        .trigger(processingTime=TRIGGER)
        .option("topic", wiring.topic)
        .option("bootstrap", wiring.bootstrap)
        .option("zookeeper", wiring.zookeeper)
        .option("checkpointLocation", str(wiring.checkpoint))
        .start()
    )


def read_aligned(spark: Any, wiring: Wiring, job: str) -> Any:
    """The subject ``wiring.topic`` read aligned as job ``job``: one batch per subject epoch."""
    return (
        spark.readStream.format(FORMAT)
        .option("topic", wiring.topic)
        .option("bootstrap", wiring.bootstrap)
        .option("zookeeper", wiring.zookeeper)
        .option("job", job)
        .option("checkpointLocation", str(wiring.checkpoint))
        .load()
    )


# What a relay job writes for each id it reads, by version: v2 computes what v1 does,
# v3 adds a column.
OUTPUTS = {
    "v1": "to_json(named_struct('id', id, 'n', length(id)))",
    "v2": "to_json(named_struct('id', id, 'n', length(id)))",
    "v3": "to_json(named_struct('id', id, 'n', length(id), 'upper', upper(id)))",
}
# The id in a record of any version.
ID_OF_OUTPUT = "get_json_object(CAST(value AS STRING), '$.id')"


def start_relay(spark: Any, wiring: Wiring, job: str, output: str, version: str, *, shadow: bool) -> Any:
    """Reads ``wiring.topic`` aligned and writes ``OUTPUTS[version]`` of each id to subject ``output``."""
    frame = read_aligned(spark, wiring, job).selectExpr("CAST(value AS STRING) AS id")
    return (
        frame.selectExpr("id AS key", f"{OUTPUTS[version]} AS value")
        .writeStream.format(FORMAT)
        .queryName(job)
        .trigger(processingTime=TRIGGER)
        .option("topic", output)
        .option("bootstrap", wiring.bootstrap)
        .option("zookeeper", wiring.zookeeper)
        .option("job", job)
        .option("shadow", str(shadow).lower())
        .option("checkpointLocation", str(wiring.checkpoint))
        .start()
    )


def start_downstream(
    spark: Any, wiring: Wiring, job: str, id_expression: str = "CAST(value AS STRING)"
) -> Any:
    """Counts each id (``id_expression`` of a row) read from the subject; one batch per subject epoch."""
    counts = read_aligned(spark, wiring, job).selectExpr(f"{id_expression} AS id").groupBy("id").count()
    return (
        counts.writeStream.format("noop")
        .outputMode("update")
        .queryName(job)
        .option("checkpointLocation", str(wiring.checkpoint))
        .start()
    )


class JobProcess:
    """One job in a process group of its own: started, SIGKILLed mid-batch, restarted.

    A restart is a new process with a new JVM that runs the query again from its
    checkpoint. So that the test need not wait for the JVM to boot, :meth:`prewarm`
    boots the next process ahead: it makes its SparkSession and waits, touching
    nothing of the job, until :meth:`start` tells it to start the query.
    """

    def __init__(
        self, kind: str, wiring: Wiring, extra: list[str], log_dir: Path, name: str | None = None
    ) -> None:
        self.kind = kind
        self.name = name or kind
        self.wiring = wiring
        self.extra = extra
        self.log_path = log_dir / f"{self.name}.log"
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._standby: tuple[subprocess.Popen[bytes], Path] | None = None

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.wiring.checkpoint)

    def _spawn(self, extra: list[str]) -> subprocess.Popen[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            # Its own session, so that a kill takes the JVM and the Python workers with it.
            return subprocess.Popen(
                [sys.executable, "-m", __name__, self.kind, *self.wiring.arguments(), *self.extra, *extra],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYSPARK_PYTHON": worker_python()},
            )  # fmt: skip

    def prewarm(self) -> JobProcess:
        """Boot the process of the next :meth:`start` now (it waits for the start)."""
        if self._standby is None:
            go = self.log_path.with_name(f"{self.name}-{self.starts + 1}.go")
            self._standby = (self._spawn(["--standby", str(go)]), go)
        return self

    def warm(self) -> bool:
        """Whether the next :meth:`start` finds a process booted (False without :meth:`prewarm`)."""
        return self._standby is not None and Path(f"{self._standby[1]}.ready").exists()

    def start(self) -> JobProcess:
        """Start the query: in the prewarmed process if there is one, else in a new one."""
        if self._standby is not None:
            self._process, go = self._standby
            self._standby = None
            go.touch()
        else:
            self._process = self._spawn([])
        self.starts += 1
        return self

    def mid_batch(self) -> bool:
        """Whether the newest planned batch has not committed (the job is running it)."""
        planned = self.checkpoint.planned_epochs()
        return bool(planned) and not self.checkpoint.is_committed(planned[-1])

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def pause(self) -> None:
        """SIGSTOP the process group: the job takes no step until :meth:`resume` (keep it short,
        within the ZooKeeper session's timeout)."""
        if self._process is not None:
            os.killpg(self._process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGCONT)

    def kill(self, *, standby: bool = False) -> None:
        """SIGKILL the whole process group: driver, JVM and Python workers; nothing shuts down.

        With ``standby``, the prewarmed process too (the end of a test).
        """
        processes = [self._process, self._standby[0] if standby and self._standby else None]
        for process in processes:
            if process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
        self._process = None
        if standby:
            self._standby = None


def _spark() -> Any:
    from epochstate.spark_plugin.alignment import register

    spark = local_session(
        "epochstate-exactly-once-job",
        cores=1,
        conf={
            "spark.driver.memory": "512m",
        },
        log_level="WARN",
    )
    register(spark)
    return spark


def _import_plugin(batches: Any) -> Any:
    import epochstate.spark_plugin.alignment.partitions
    import epochstate.spark_plugin.alignment.sink  # noqa: F401 - what the query's tasks import

    yield from batches


def _warm_up(spark: Any) -> None:
    """Start the Python workers that the query's start and tasks reuse, each with the plugin imported:
    a task's, and the one that makes the data source's reader and writer (loading the source runs it
    and reads nothing: the source's options are parsed only when the query starts)."""
    spark.range(1, numPartitions=1).mapInArrow(_import_plugin, "id long").collect()
    spark.readStream.format(FORMAT).load()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.alignment.jobs")
    parser.add_argument("kind", choices=["upstream", "downstream", "relay"])
    for name in ("--checkpoint", "--topic", "--bootstrap", "--zookeeper"):
        parser.add_argument(name, required=True)
    parser.add_argument("--input", help="upstream: the directory of input files")
    parser.add_argument("--job", help="downstream, relay: the job name")
    parser.add_argument("--output", help="relay: the output subject")
    parser.add_argument("--version", choices=sorted(OUTPUTS), help="relay: what it writes")
    parser.add_argument("--shadow", action="store_true", help="relay: the new job of a hot-swap")
    parser.add_argument("--standby", help="start the query only once this file exists (JobProcess.prewarm)")
    args = parser.parse_args(argv)
    wiring = Wiring(Path(args.checkpoint), args.topic, args.bootstrap, args.zookeeper)
    spark = _spark()
    if args.standby:
        go = Path(args.standby)
        _warm_up(spark)
        Path(f"{go}.ready").touch()
        waiting = threading.Event()
        while not go.exists():
            waiting.wait(0.01)
    while True:  # a supervisor: a query that failed starts again from its checkpoint
        if args.kind == "upstream":
            query = start_upstream(spark, wiring, Path(args.input))
        elif args.kind == "relay":
            query = start_relay(spark, wiring, args.job, args.output, args.version, shadow=args.shadow)
        else:
            query = start_downstream(spark, wiring, args.job)
        try:
            query.awaitTermination()
            return
        except Exception as error:  # StreamingQueryException; on a busy machine e.g. a slow Python worker
            print(f"query failed, starting it again: {error}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
