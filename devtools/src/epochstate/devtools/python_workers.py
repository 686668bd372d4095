"""Spark's Python workers for the demos' and tests' Spark: this interpreter, importing
pyspark byte-compiled from site-packages rather than from source out of pyspark's zip.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's source zip first on the
``PYTHONPATH`` of every Python process it starts: each worker daemon (one per worker
module: UDFs, a data source's planning, reads and writes), each worker forked from one,
each streaming Python source's runner. The zips hold no byte code, so each of those
processes compiles every pyspark module it imports from source, and a zip importer
cannot keep what it compiled. In the hot-swap test that was more than half of all the
CPU used. A pip-installed pyspark is the same code in site-packages, compiled once
into ``__pycache__``.

:func:`worker_python` is what ``PYSPARK_PYTHON`` should name: a small launcher that drops
those two zips (of a pip-installed pyspark, ``.../pyspark/python/lib/``) from
``PYTHONPATH`` and runs this interpreter, whose site-packages hold that same pyspark
and py4j. Every other entry stays. Without a pip-installed pyspark, or where the launcher
cannot be written, it is this interpreter itself.
"""

from __future__ import annotations

import hashlib
import os
import sys

from epochstate.devtools.classpath import cache_dir, pyspark_jars_dir

_LAUNCHER = """\
#!/bin/sh
# Spark's Python workers on {python}, without a pip-installed pyspark's zips on the
# path: the same pyspark and py4j come byte-compiled from site-packages
# (written by epochstate.devtools.python_workers).
kept=
old_ifs=$IFS
IFS=:
for entry in $PYTHONPATH; do
    case $entry in
        */pyspark/python/lib/pyspark.zip | */pyspark/python/lib/py4j-*-src.zip) ;;
        *) kept=${{kept:+$kept:}}$entry ;;
    esac
done
IFS=$old_ifs
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
exec {python} "$@"
"""


def worker_python() -> str:
    """The executable Spark should start its Python workers with (``PYSPARK_PYTHON``): the
    launcher of this interpreter when its pyspark is pip-installed, else the interpreter."""
    if pyspark_jars_dir() is None:
        return sys.executable
    return launcher(sys.executable)


def launcher(python: str) -> str:
    """The launcher of ``python`` (an interpreter whose site-packages hold a pip-installed
    pyspark), written once into :func:`~epochstate.devtools.classpath.cache_dir`; ``python``
    itself where it cannot be written or its path needs quoting."""
    if not python or any(c in python for c in "'\"\\$` \n"):
        return python
    text = _LAUNCHER.format(python=python)
    path = cache_dir() / f"python-workers-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    if not path.is_file():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.{os.getpid()}")
            partial.write_text(text)
            partial.chmod(0o755)
            partial.replace(path)
        except OSError:
            return python
    return str(path)
