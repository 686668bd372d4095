"""The workload's queries as streaming jobs: one per (store set-up, query), fed one
file per batch, set-up by set-up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .queries import BATCHES, QUERIES, SCHEMA, SETTINGS, SETUPS, Query, StoreSetup, rows

LAUNCH_FAILURE = "connect back"


class Job:
    """One query on one set-up, fed one file per batch from its set-up's input folder."""

    def __init__(self, spark: Any, out: Path, setup: StoreSetup, query: Query) -> None:
        self.spark, self.setup, self.query = spark, setup, query
        self.name = f"{setup.name}-{query.name}"
        self.checkpoint = out / "checkpoints" / self.name
        self.inputs = out / "inputs" / setup.name
        self.stream: Any = None

    def start(self) -> None:
        self.inputs.mkdir(parents=True, exist_ok=True)
        for name in SETTINGS:
            self.spark.conf.unset(name)
        for name, value in self.setup.conf.items():
            self.spark.conf.set(name, value)
        source = self.spark.readStream.format("json").schema(SCHEMA).option("maxFilesPerTrigger", 1)
        frame = self.query.build(source.load(str(self.inputs)))
        self.stream = (
            frame.writeStream.outputMode(self.query.output_mode)
            .format("noop")
            .queryName(self.name)
            .option("checkpointLocation", str(self.checkpoint))
            .start()
        )
        for name in SETTINGS:  # a query keeps the settings it started with
            self.spark.conf.unset(name)

    def catch_up(self, attempts: int = 3) -> None:
        """Process every input file; a query whose Python worker did not connect back in
        time (a loaded machine) restarts from its checkpoint, as after any task failure."""
        from pyspark.errors import StreamingQueryException

        while True:
            try:
                self.stream.processAllAvailable()
                return
            except StreamingQueryException as error:
                attempts -= 1
                if LAUNCH_FAILURE not in str(error) or attempts == 0:
                    raise
                self.stream.stop()
                self.start()

    def committed(self) -> list[int]:
        commits = self.checkpoint / "commits"
        return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else []


def feed(inputs: Path, batch: int) -> None:
    inputs.mkdir(parents=True, exist_ok=True)
    temporary = inputs / f".{batch}.tmp"
    temporary.write_text("".join(json.dumps(r) + "\n" for r in rows(batch)))
    temporary.rename(inputs / f"{batch:03d}.json")


def plan_jobs(spark: Any, out: Path, features: dict[str, bool]) -> list[list[Job]]:
    """Every query on every set-up this release has, grouped by set-up."""
    groups = []
    for setup in SETUPS:
        if setup.format_v2 and not features["checkpoint_format_v2"]:
            continue
        groups.append(
            [
                Job(spark, out, setup, q)
                for q in QUERIES
                if (not q.variables or features["transform_with_state"])
                and (setup.rocksdb or not q.rocksdb_only)
            ]
        )
    return groups


def run_jobs(groups: list[list[Job]]) -> None:
    """Set-up by set-up, its queries concurrently: :data:`BATCHES` batches each."""
    for group in groups:
        for job in group:
            job.start()
        try:
            for batch in range(BATCHES):
                feed(group[0].inputs, batch)
                for job in group:
                    job.catch_up()
        finally:
            for job in group:
                job.stream.stop()
