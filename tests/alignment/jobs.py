"""The chained jobs of the exactly-once test, runnable in a process of their own to be SIGKILLed.

The SparkSession of a test session is shared, and a query stopped in-process
runs its shutdown path; a crash is only real when the driver's whole process
group dies mid-batch. So each job can run as::

    python -m tests.alignment.jobs upstream   --checkpoint C --topic T --bootstrap B --zookeeper Z --input D
    python -m tests.alignment.jobs downstream --checkpoint C --topic T --bootstrap B --zookeeper Z --job J

in a small local[1] JVM (512 MiB), and :class:`JobProcess` starts and kills such a
process. The query builders are shared with the in-process reference job.

upstream: JSON files ``{"id": ...}`` (one file per batch) -> the aligned sink, two write tasks.
downstream: the subject, aligned -> count per id (the state the test checks).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
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


def start_downstream(spark: Any, wiring: Wiring, job: str) -> Any:
    """Counts each id read from the subject; one batch per subject epoch."""
    counts = (
        spark.readStream.format(FORMAT)
        .option("topic", wiring.topic)
        .option("bootstrap", wiring.bootstrap)
        .option("zookeeper", wiring.zookeeper)
        .option("job", job)
        .option("checkpointLocation", str(wiring.checkpoint))
        .load()
        .selectExpr("CAST(value AS STRING) AS id")
        .groupBy("id")
        .count()
    )
    return (
        counts.writeStream.format("noop")
        .outputMode("update")
        .queryName(job)
        .option("checkpointLocation", str(wiring.checkpoint))
        .start()
    )


class JobProcess:
    """One job in a process group of its own: started, SIGKILLed mid-batch, restarted."""

    def __init__(self, kind: str, wiring: Wiring, extra: list[str], log_dir: Path) -> None:
        self.kind = kind
        self.wiring = wiring
        self.extra = extra
        self.log_path = log_dir / f"{kind}.log"
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.wiring.checkpoint)

    def start(self) -> JobProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            # Its own session, so that a kill takes the JVM and the Python workers with it.
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, self.kind, *self.wiring.arguments(), *self.extra],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            )  # fmt: skip
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

    def kill(self) -> None:
        """SIGKILL the whole process group: driver, JVM and Python workers; nothing shuts down."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(30)
            self._process = None


def _spark() -> Any:
    from epochstate.spark_plugin.alignment import register

    spark = local_session(
        "epochstate-exactly-once-job",
        cores=1,
        conf={
            "spark.driver.memory": "512m",
            # A JVM that starts fast: the test restarts these jobs several times.
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        },
        log_level="WARN",
    )
    register(spark)
    return spark


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.alignment.jobs")
    parser.add_argument("kind", choices=["upstream", "downstream"])
    for name in ("--checkpoint", "--topic", "--bootstrap", "--zookeeper"):
        parser.add_argument(name, required=True)
    parser.add_argument("--input", help="upstream: the directory of input files")
    parser.add_argument("--job", help="downstream: the job name")
    args = parser.parse_args(argv)
    wiring = Wiring(Path(args.checkpoint), args.topic, args.bootstrap, args.zookeeper)
    spark = _spark()
    while True:  # a supervisor: a query that failed starts again from its checkpoint
        if args.kind == "upstream":
            query = start_upstream(spark, wiring, Path(args.input))
        else:
            query = start_downstream(spark, wiring, args.job)
        try:
            query.awaitTermination()
            return
        except Exception as error:  # StreamingQueryException; on a busy machine e.g. a slow Python worker
            print(f"query failed, starting it again: {error}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
