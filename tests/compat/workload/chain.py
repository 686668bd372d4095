"""A chained pair through the aligned Kafka sink and source, in a release's driver.

``upstream`` writes one JSON file per batch to a two-partition subject through the
sink (two write tasks); ``downstream`` reads the subject aligned and collects, per
batch, the rows it read (value, partition, offset, subject epoch). The test
compares them with the subject epochs registered in ZooKeeper and the broker's
records.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

FORMAT = "epochstate-kafka"
# Upstream's batches; batch 1 is empty, so subject epoch 1 is empty.
BATCHES: tuple[list[str], ...] = (["a", "b", "c"], [], ["d", "e", "f", "g"])
LAUNCH_FAILURE = "connect back"  # Spark gave a Python worker too little time on a busy machine
ATTEMPTS = 4
WAIT_SECONDS = 120.0


def _wiring(writer_or_reader: Any, topic: str, bootstrap: str, zookeeper: str, checkpoint: Path) -> Any:
    return (
        writer_or_reader.option("topic", topic)
        .option("bootstrap", bootstrap)
        .option("zookeeper", zookeeper)
        .option("checkpointLocation", str(checkpoint))
    )


class _Collected:
    """What downstream's foreachBatch saw: batch -> runs, each a sorted list of rows."""

    def __init__(self) -> None:
        self.runs: dict[int, list[list[list[Any]]]] = {}
        self.lock = threading.Lock()

    def __call__(self, frame: Any, batch: int) -> None:
        rows = sorted(
            [bytes(r.value).decode(), r.partition, r.offset, r.subject_epoch]
            for r in frame.select("value", "partition", "offset", "subject_epoch").collect()
        )
        with self.lock:
            self.runs.setdefault(batch, []).append(rows)


def _started(query: Any, timeout: float = WAIT_SECONDS) -> bool:
    """Whether ``query`` got past starting its source (False: its Python worker did not connect)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        error = query.exception()
        if error is not None:
            if LAUNCH_FAILURE in str(error):
                query.stop()
                return False
            raise RuntimeError(str(error))
        if query.recentProgress or query.status["message"] not in (
            "Initializing StreamExecution",
            "Initializing sources",
        ):
            return True
        time.sleep(0.1)
    return True


def run_chain(spark: Any, directory: Path, topic: str, bootstrap: str, zookeeper: str) -> dict[str, Any]:
    """Run the pair for :data:`BATCHES`; what each side did, as JSON data."""
    from epochstate.spark_plugin.alignment import register

    register(spark)
    inputs = directory / "upstream-input"
    inputs.mkdir(parents=True)
    source = (
        spark.readStream.format("json").schema("id string").option("maxFilesPerTrigger", 1).load(str(inputs))
    )
    upstream = _wiring(
        source.repartition(2)
        .selectExpr("id AS key", "id AS value")
        .writeStream.format(FORMAT)
        .queryName("upstream"),
        topic,
        bootstrap,
        zookeeper,
        directory / "upstream",
    ).start()
    collected = _Collected()
    reader = _wiring(spark.readStream.format(FORMAT).option("job", "downstream"), topic, bootstrap, zookeeper,
                     directory / "downstream")  # fmt: skip
    writer = reader.load().writeStream.foreachBatch(collected).queryName("downstream")
    writer = writer.option("checkpointLocation", str(directory / "downstream"))
    downstream = None

    def feed(number: int) -> None:
        ids = BATCHES[number]
        (inputs / f".{number}.tmp").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
        (inputs / f".{number}.tmp").rename(inputs / f"{number}.json")
        upstream.processAllAvailable()

    try:
        # Downstream starts once epoch 0 is registered: a query's first batch runs even
        # when its source has nothing yet, and would read no epoch.
        feed(0)
        for attempt in range(ATTEMPTS):
            time.sleep(attempt * 5.0)
            downstream = writer.start()
            if _started(downstream):
                break
        else:
            raise RuntimeError(f"the aligned source's Python worker did not start in {ATTEMPTS} attempts")
        for number in range(len(BATCHES)):
            if number:
                feed(number)
            deadline = time.monotonic() + WAIT_SECONDS
            while number not in collected.runs:
                if downstream.exception() is not None:
                    raise RuntimeError(str(downstream.exception()))
                if time.monotonic() > deadline:
                    raise RuntimeError(f"downstream read no batch {number} within {WAIT_SECONDS:.0f} s")
                time.sleep(0.05)
        downstream.processAllAvailable()
    finally:
        for query in (downstream, upstream):
            if query is not None:
                query.stop()
    return {
        "topic": topic,
        "fed": [list(ids) for ids in BATCHES],
        "runs": {str(batch): runs for batch, runs in sorted(collected.runs.items())},
    }
