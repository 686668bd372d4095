"""Builds the class-data sharing archive of Spark's classes (:mod:`epochstate.devtools.jvm_options`).

``python -m epochstate.devtools.class_archive`` (``make pytest`` runs it) builds, unless
they exist, the jar of :mod:`epochstate.devtools.local_filesystem` and then the archive for
this Java, this pyspark and that jar: a JVM configured as the demos' and tests' runs what
they load and stores its classes when it exits.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from epochstate.devtools import local_filesystem
from epochstate.devtools.classpath import keep_only
from epochstate.devtools.jvm_options import ARCHIVE_PREFIX, archive_path
from epochstate.devtools.spark_session import local_session


def _workload(spark: Any, directory: Path) -> None:
    """A Python worker, a stateful streaming query from files, Spark's state reader."""
    spark.range(4, numPartitions=2).mapInArrow(lambda batches: batches, "id long").collect()
    inputs = directory / "input"
    inputs.mkdir()
    (inputs / "part-0.json").write_text("".join(f'{{"id": "i{n % 3}"}}\n' for n in range(9)))
    checkpoint = directory / "checkpoint"
    query = (
        spark.readStream.format("json")
        .schema("id string")
        .load(str(inputs))
        .groupBy("id")
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.read.format("statestore").load(str(checkpoint)).collect()


def build(path: Path) -> None:
    """Run the workload in a JVM that writes its classes to ``path`` when it exits.

    Raises OSError when no archive could be written (a JVM without class-data sharing).

    The archive appears at once (renamed into place), so a JVM starting meanwhile
    maps none rather than half of one. Archives of other Java or pyspark builds go.
    """
    from pyspark import SparkContext

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    with tempfile.TemporaryDirectory(prefix="class-archive-") as directory:
        spark = local_session(
            "epochstate-class-archive",
            # Its warnings name each class it cannot store (signed jars, old class files).
            conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds*=error"},
            log_level="ERROR",
        )
        _workload(spark, Path(directory))
        gateway = SparkContext._gateway
        assert gateway is not None
        jvm = gateway.proc
        spark.stop()
        # The gateway's JVM exits when its stdin closes, and writes the archive then.
        jvm.stdin.close()
        jvm.wait()
    if not partial.is_file():
        raise OSError(f"the JVM wrote no class archive to {partial}")
    partial.replace(path)
    keep_only(path, f"{ARCHIVE_PREFIX}*.jsa")


def main() -> None:
    jar = local_filesystem.jar_path()
    if jar is not None and not jar.is_file():
        print(f"building Hadoop's local file system without child processes, {jar}", file=sys.stderr)
        try:
            local_filesystem.build(jar)
            keep_only(jar, f"{local_filesystem.JAR_PREFIX}*.jar")
        except OSError as error:  # JVMs use Hadoop's own classes: slower, not wrong
            print(f"no local file system jar: {error}", file=sys.stderr)
    path = archive_path()
    if path is None:
        print("no Java or no pyspark: no Spark class archive", file=sys.stderr)
    elif not path.is_file():
        print(f"building the Spark class archive {path} (once per Java and pyspark)", file=sys.stderr)
        try:
            build(path)
        except OSError as error:  # JVMs start as without it: slower, not wrong
            print(f"no Spark class archive: {error}", file=sys.stderr)


if __name__ == "__main__":
    main()
