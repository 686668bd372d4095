"""JVM options for the short-lived, small JVMs of demos and tests.

A local Spark job of a few batches spends most of its CPU compiling its code with the
JIT's optimising tier and running parallel garbage collectors, work that pays back only
in a JVM that runs for long. On the test workloads, the JIT's first tier and the serial
collector halve the CPU a Spark JVM uses (28 s against 14 s for a six-batch aggregation
and its state reads, on 2 cores). Production jobs keep their own settings.

A Spark JVM also spends about half of its start's CPU loading, parsing and verifying the
same few thousand classes from the same jars. HotSpot maps them, parsed and verified, from
a class-data sharing archive once :mod:`epochstate.devtools.class_archive` has built one
for this Java and this pyspark. The archive's name is a digest of the java executable and
of Spark's jars, so an upgrade of either uses none until it is built again; a JVM that
cannot use an archive (another classpath first) says so in one line and loads its classes
as without.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from epochstate.devtools import local_filesystem
from epochstate.devtools.classpath import cache_dir, find_java, pyspark_jars_dir
from epochstate.devtools.errors import JavaNotFound

SMALL_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
ARCHIVE_PREFIX = "spark-classes-"


def with_small_jvm(options: str | None) -> str:
    """``options`` (a ``spark.driver.extraJavaOptions`` string) after :data:`SMALL_JVM_OPTIONS`
    and the Spark class archive, if built; a later option of the same name wins, as in any
    java command line."""
    return " ".join(filter(None, [*SMALL_JVM_OPTIONS, archive_option(), options]))


@functools.cache
def archive_path() -> Path | None:
    """Where the class archive for this Java and pyspark is (or goes); None without either."""
    jars = pyspark_jars_dir()
    try:
        java = Path(find_java()).resolve()
    except JavaNotFound:
        return None
    if jars is None:
        return None
    digest = hashlib.sha256()
    # The archive holds the classes of the class path it was built with: the local file
    # system's jar, once built, comes first in the drivers' (local_filesystem.spark_conf).
    local_fs = local_filesystem.jar_path()
    extra = [local_fs] if local_fs is not None and local_fs.is_file() else []
    for path in [java, *extra, *sorted(jars.glob("*.jar"))]:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return cache_dir() / f"{ARCHIVE_PREFIX}{digest.hexdigest()[:16]}.jsa"


def archive_option() -> str | None:
    """The JVM option that maps the class archive, if it has been built."""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path}" if path is not None and path.is_file() else None


def small_jvm_conf(options: str | None = None) -> dict[str, str]:
    """The Spark settings of a small driver JVM: its Java options (:func:`with_small_jvm`
    of ``options``) and, once built, the local file system of
    :mod:`epochstate.devtools.local_filesystem`."""
    return {"spark.driver.extraJavaOptions": with_small_jvm(options), **local_filesystem.spark_conf()}
