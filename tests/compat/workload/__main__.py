"""The workload's command line, run by a release's interpreter::

    python -P -m epochstate_compat_workload run --out DIR [--report-to HOST:PORT]
        [--bootstrap B --zookeeper Z --topic T]

It probes the release, runs every query on every state store set-up it has (with
the listener reporting to ``--report-to``), dumps Spark's reader for each
checkpoint if the release has one, then runs the aligned chain if given a broker.
It writes ``DIR/result.json``: the phases' outcomes, errors included, so that the
test reports each phase on its own.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .jobs import plan_jobs, run_jobs
from .oracle import dump_job


def session() -> Any:
    """The release's local session; ``$EPOCHSTATE_COMPAT_SPARK_CONF`` (JSON) adds settings
    (the local file system of ``epochstate.devtools.local_filesystem``)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in json.loads(os.environ.get("EPOCHSTATE_COMPAT_SPARK_CONF") or "{}").items():
        builder = builder.config(key, value)
    spark = (
        # Up to three attempts per task: on a loaded machine a new Python worker can
        # miss Spark's time to connect back, which fails only that attempt.
        builder.master("local[2,3]")
        .appName("epochstate-compat")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(
            "spark.driver.extraJavaOptions", "-Duser.timezone=UTC -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
        )
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "200ms")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        # Python workers connect back to the JVM within this (default 15 s), as in the
        # main suite's session: a loaded machine failed a 4.0 workload without it.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def probe(spark: Any) -> dict[str, bool]:
    """What this release has (see ``tests/compat/releases.py``)."""
    from pyspark.sql.group import GroupedData

    try:
        spark.read.format("statestore").load("/nonexistent/epochstate-compat-probe")
        reader = True
    except Exception as error:
        reader = "DATA_SOURCE_NOT_FOUND" not in str(error)
    try:
        spark.conf.get("spark.sql.streaming.stateStore.checkpointFormatVersion")
        format_v2 = True
    except Exception:
        format_v2 = False
    return {
        "state_reader": reader,
        "transform_with_state": hasattr(GroupedData, "transformWithStateInPandas"),
        "checkpoint_format_v2": format_v2,
        "python_data_source": importlib.util.find_spec("pyspark.sql.datasource") is not None,
    }


def _error(error: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(error), error)).strip()[:2000]


def jvm_cpu_seconds(spark: Any) -> float:
    """CPU time the driver's JVM has used so far (it is no child this process waits for)."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(timings: dict[str, float], phase: str, step: Callable[[], Any]) -> Any:
    started = time.monotonic()
    try:
        return step()
    finally:
        timings[phase] = round(time.monotonic() - started, 1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import pyspark

    out: Path = args.out
    timings: dict[str, float] = {}
    spark = timed(timings, "session", session)
    features = probe(spark)
    result: dict[str, Any] = {"pyspark": pyspark.__version__, "features": features, "timings": timings}
    groups = plan_jobs(spark, out, features)
    jobs = [job for group in groups for job in group]
    reporter = None
    if args.report_to:
        from epochstate.spark_plugin.listener import EpochReporter

        # The daemon follows each job on its first report.
        reporter = EpochReporter(args.report_to, checkpoints={job.name: str(job.checkpoint) for job in jobs})
        spark.streams.addListener(reporter)
    try:
        timed(timings, "queries", lambda: run_jobs(groups))
    finally:
        if reporter is not None:
            # Spark's listener bus delivers progress events after the batch: let the
            # last ones arrive before the listener goes.
            deadline = time.monotonic() + 30
            commits = sum(len(job.committed()) for job in jobs)
            while reporter.sent + reporter.dropped < commits and time.monotonic() < deadline:
                time.sleep(0.1)
            spark.streams.removeListener(reporter)
            reporter.close()
            result["listener"] = {"sent": reporter.sent, "dropped": reporter.dropped}
    result["jobs"] = {
        job.name: {
            "setup": job.setup.name,
            "query": job.query.name,
            "checkpoint": str(job.checkpoint),
            "committed": job.committed(),
            "format_v2": job.setup.format_v2,
            "stores": list(job.query.stores),
            "variables": dict(job.query.variables),
        }
        for job in jobs
    }
    if features["state_reader"]:
        result["oracle"] = timed(timings, "oracle", lambda: read_all(spark, result["jobs"]))
    if args.bootstrap and features["python_data_source"]:
        from .chain import run_chain

        try:
            result["chain"] = timed(
                timings,
                "chain",
                lambda: run_chain(spark, out / "chain", args.topic, args.bootstrap, args.zookeeper),
            )
        except Exception as error:
            result["chain"] = {"error": _error(error)}
    timings["jvm_cpu"] = round(jvm_cpu_seconds(spark), 1)
    return result


def read_all(spark: Any, jobs: dict[str, Any]) -> dict[str, Any]:
    """Spark's reader of every job's checkpoint: job -> dump."""
    return {name: dump_job(spark, job) for name, job in jobs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="epochstate_compat_workload")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--report-to", help="host:port of a daemon for the listener")
    parser.add_argument("--bootstrap")
    parser.add_argument("--zookeeper")
    parser.add_argument("--topic")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    args.out.mkdir(parents=True, exist_ok=True)
    result = run(args)
    target = args.out / "result.json"
    temporary = target.with_suffix(".tmp")
    temporary.write_text(json.dumps(result))
    temporary.rename(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
