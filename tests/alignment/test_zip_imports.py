"""Zip imports in Spark's Python workers: an unchanged archive is not re-read, a changed one is."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

# Runs in a fresh interpreter: installing the importer changes the process's import system.
PROBE = textwrap.dedent(
    """
    import importlib, sys, zipfile, zipimport
    from epochstate.spark_plugin.zip_imports import SteadyZipImporter, steady_zip_imports

    archive = sys.argv[1]
    sys.path.insert(0, archive)
    import probe_package.first
    reads = []
    original = zipimport._read_directory
    zipimport._read_directory = lambda path: reads.append(path) or original(path)
    importlib.invalidate_caches()
    print("plain", len(reads))
    if steady_zip_imports() and steady_zip_imports():  # not installed from CPython 3.13 on
        finders = [f for f in sys.path_importer_cache.values() if isinstance(f, zipimport.zipimporter)]
        assert finders and all(isinstance(f, SteadyZipImporter) for f in finders), finders
    reads.clear()
    for _ in range(3):
        importlib.invalidate_caches()
    print("steady", len(reads))
    with zipfile.ZipFile(archive, "a") as changed:
        changed.writestr("probe_package/second.py", "VALUE = 2\\n")
    importlib.invalidate_caches()
    import probe_package.second
    print("changed", probe_package.first.VALUE + probe_package.second.VALUE)
    """
)


def test_an_unchanged_archive_is_not_read_again(tmp_path: Path) -> None:
    archive = tmp_path / "probe.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        packed.writestr("probe_package/__init__.py", "")
        packed.writestr("probe_package/first.py", "VALUE = 1\n")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(archive)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    counts = dict(line.split() for line in done.stdout.splitlines())
    if sys.version_info < (3, 13):
        assert int(counts["plain"]) >= 2, "one read per zip importer: the archive and its package"
    assert counts["steady"] == "0"
    assert counts["changed"] == "3", "a module added to the archive is found after invalidation"
