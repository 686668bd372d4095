"""The Spark releases the compatibility suite runs, and what each one has.

Each release but the project's pin runs in a virtualenv of its own (``venvs``);
the pin, whose reader reads what older readers cannot, runs in the interpreter of
the test session. What a release has is not
taken on trust: the workload probes it in that release's driver and the suite
fails when the probe and this table disagree, so the support matrix in
``docs/coverage.md`` rests on what was found.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Features:
    """What a Spark release offers the workload, as probed in its driver."""

    # spark.read.format("statestore") and "state-metadata" (the oracle).
    state_reader: bool
    # GroupedData.transformWithStateInPandas.
    transform_with_state: bool
    # spark.sql.streaming.stateStore.checkpointFormatVersion (format 2 with unique ids).
    checkpoint_format_v2: bool
    # pyspark.sql.datasource (the aligned Kafka source and sink are Python data sources).
    python_data_source: bool


@dataclass(frozen=True)
class SparkRelease:
    """One Spark release: the newest patch of its series on PyPI and what it has."""

    series: str  # "4.0"
    pyspark: str  # "4.0.5"
    features: Features
    # Whether its own state reader reads the format 2 checkpoints it writes (found by
    # running it: Spark 4.0's reader takes the files' unique ids for version numbers).
    reader_reads_format_v2: bool = True
    # Whether its virtualenv gets pandas and pyarrow (transformWithStateInPandas and
    # Python data sources need them; 3.5 uses neither).
    pandas: bool = True
    # The project's pin runs in the test session's own interpreter, not a venv.
    pinned: bool = False

    @property
    def name(self) -> str:
        return f"spark-{self.series}"

    def __str__(self) -> str:
        return self.name


RELEASES = (
    SparkRelease(
        "3.5", "3.5.9", Features(False, False, False, False), reader_reads_format_v2=False, pandas=False
    ),
    SparkRelease("4.0", "4.0.5", Features(True, True, True, True), reader_reads_format_v2=False),
    SparkRelease("4.1", "4.1.4", Features(True, True, True, True)),
    SparkRelease("4.2", "4.2.1", Features(True, True, True, True)),
    SparkRelease("4.3", "4.3.0", Features(True, True, True, True), pinned=True),
)

# The release whose reader reads the checkpoints of a release without one (3.5), or
# the stores a release's own reader cannot read (4.0's format 2).
READER_OF_LAST_RESORT = next(r for r in RELEASES if r.pinned)
# The releases the suite runs the workload on. The pin's checkpoints, listener and
# aligned source and sink are the main suite's subject (tests/e2e, tests/alignment).
UNDER_TEST = tuple(r for r in RELEASES if not r.pinned)
