"""Hadoop's local file system without a child process per call, for the demos' and tests' Spark JVMs.

Without Hadoop's native library (the pyspark wheel ships none), Hadoop's local file
system sets a file's permission bits by running ``chmod`` and asks whether a path is a
symbolic link by running ``readlink``. Spark writes each checkpoint file through
FileContext: a create (one ``chmod``) and a rename (a ``readlink`` of each path), so three
processes forked from the JVM per file, each costing the JVM 1.5 to 2 ms. A 20-batch
RocksDB aggregation on 2 cores took 15 to 21 s with them and 10.4 to 11 s without.

The Java classes in ``hadoop_local/`` make those two calls through ``java.nio``, as
Hadoop's native library would, and leave every other call, the files written and their
order to Hadoop: the ``file:`` scheme's FileSystem and FileContext are Hadoop's
checksummed local file systems over them. :mod:`epochstate.devtools.class_archive` compiles
them once per Java and pyspark into a jar under :func:`~epochstate.devtools.classpath.cache_dir`;
until then (or without ``javac``) the JVMs use Hadoop's classes as they are.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from epochstate.devtools.classpath import cache_dir, find_java, pyspark_jars_dir
from epochstate.devtools.errors import JavaNotFound

SOURCES = Path(__file__).parent / "hadoop_local"
PACKAGE = "epochstate.devtools.hadoop_local"
JAR_PREFIX = "hadoop-local-"


def _javac() -> str | None:
    """The ``javac`` beside the java executable, else on PATH; None without one."""
    try:
        java = Path(find_java()).resolve()
    except JavaNotFound:
        return None
    beside = java.with_name("javac")
    return str(beside) if beside.is_file() else shutil.which("javac")


def sources_digest() -> str:
    """A digest of the Java sources: a jar named by it is built from these."""
    digest = hashlib.sha256()
    for source in sorted(SOURCES.glob("*.java")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def jar_path() -> Path | None:
    """Where the jar for this Java, this interpreter's pyspark and these sources is (or goes);
    None without pyspark or a ``javac``."""
    jars, javac = pyspark_jars_dir(), _javac()
    if jars is None or javac is None:
        return None
    digest = hashlib.sha256(f"{javac}\0{sources_digest()}\n".encode())
    for jar in sorted(jars.glob("hadoop-client-*.jar")):
        digest.update(f"{jar.name}\0{jar.stat().st_size}\n".encode())
    return cache_dir() / f"{JAR_PREFIX}{digest.hexdigest()[:16]}.jar"


def spark_conf(jar: Path | None = None) -> dict[str, str]:
    """The Spark settings that put the classes (``jar``, default :func:`jar_path`) on the
    driver's class path and make them the ``file:`` scheme's; none unless the jar is built."""
    path = jar or jar_path()
    if path is None or not path.is_file():
        return {}
    return {
        "spark.driver.extraClassPath": str(path),
        "spark.hadoop.fs.file.impl": f"{PACKAGE}.NioLocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": f"{PACKAGE}.NioLocalFs",
    }


def build(path: Path, jars: Path | None = None) -> None:
    """Compile the classes against Spark's ``jars`` (default: this interpreter's pyspark's)
    into the jar ``path``, which appears at once (renamed into place).

    Raises:
        OSError: no ``javac`` or pyspark, or the compiler failed (its output says why).
    """
    jars, javac = jars or pyspark_jars_dir(), _javac()
    if jars is None or javac is None:
        raise OSError("no javac or no pyspark: Hadoop's local file system stays as it is")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hadoop-local-") as directory:
        classes = Path(directory, "classes")
        compiled = subprocess.run(
            [
                javac,
                "-nowarn",
                "-d",
                str(classes),
                "-cp",
                f"{jars}/*",
                *map(str, sorted(SOURCES.glob("*.java"))),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if compiled.returncode != 0:
            raise OSError(f"javac failed: {compiled.stderr.strip() or compiled.stdout.strip()}")
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        with zipfile.ZipFile(partial, "w") as jar:
            for item in sorted(classes.rglob("*.class")):
                jar.write(item, item.relative_to(classes).as_posix())
    partial.replace(path)
