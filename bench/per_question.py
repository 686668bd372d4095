"""One question answered by a process started for it: what a service without a Spark
session of its own pays to learn a job's state.

    python -m bench.per_question spark-epoch CHECKPOINT EPOCH
    python -m bench.per_question spark-changes CHECKPOINT FIRST LAST
    python -m bench.per_question client-epoch TARGET JOB EPOCH
    python -m bench.per_question client-changes TARGET JOB FIRST LAST

Each prints the number of rows it read into Arrow. The ``spark-*`` questions start a
local-mode Spark application, read with Spark's state reader (``toArrow()``) and stop
it; the ``client-*`` ones import the client, connect to the daemon and read with
``scan_table`` or ``changes_batches_of``. :func:`ask` times one from the start of its
process to its exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def ask(*question: str) -> tuple[float, int]:
    """Wall seconds of a process answering ``question`` (its arguments above), and the rows it read."""
    environment = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "bench.per_question", *question],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(question)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, int(done.stdout.split()[-1])


def _spark(checkpoint: str, options: dict[str, Any]) -> int:
    from epochstate.devtools.spark_session import local_session

    spark = local_session("per-question", conf={"spark.sql.session.timeZone": "UTC"})
    try:
        reader = spark.read.format("statestore")
        for name, value in options.items():
            reader = reader.option(name, value)
        rows: int = reader.load(checkpoint).toArrow().num_rows
        return rows
    finally:
        spark.stop()


def _client(target: str, job: str, first: int, last: int | None) -> int:
    import pyarrow as pa  # type: ignore[import-untyped]

    from epochstate.client import EpochStateClient
    from epochstate.client.arrow import changes_batches_of, scan_table

    with EpochStateClient(target, timeout=120) as client:
        if last is None:
            rows: int = scan_table(client, job, epoch=first).num_rows
        else:
            feed = changes_batches_of(client, job, from_epoch=first, to_epoch=last, page_size=10_000)
            rows = pa.Table.from_batches(list(feed)).num_rows
        return rows


def main(argv: list[str]) -> None:
    kind, *rest = argv
    if kind == "spark-epoch":
        rows = _spark(rest[0], {"batchId": int(rest[1])})
    elif kind == "spark-changes":
        options = {
            "readChangeFeed": "true",
            "changeStartBatchId": int(rest[1]),
            "changeEndBatchId": int(rest[2]),
        }
        rows = _spark(rest[0], options)
    elif kind == "client-epoch":
        rows = _client(rest[0], rest[1], int(rest[2]), None)
    elif kind == "client-changes":
        rows = _client(rest[0], rest[1], int(rest[2]), int(rest[3]))
    else:
        raise SystemExit(
            f"unknown question {kind!r}: spark-epoch, spark-changes, client-epoch, client-changes"
        )
    print(rows)


if __name__ == "__main__":
    main(sys.argv[1:])
