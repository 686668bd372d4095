"""Python workers of Spark on CPython < 3.13: zip archives are re-read only when they change.

PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task
(``worker_util.setup_spark_files``), and its modules come from ``pyspark.zip``.
Before CPython 3.13 (gh-103200) a zip importer answers that call by re-reading its
archive's whole directory, and a worker holds one zip importer per package it
imported from the archive (a data source read imports many): at the start of
every task that costs more than the rest of an aligned read does
(``bench/alignment.py`` times the read).

:func:`steady_zip_imports` makes this process's zip importers re-read an archive
only when its size or modification time changed, which is what 3.13 does in
effect (it drops the cached directory and reads it again only on the next
import). Imports of modules already loaded are not affected; a zip file
replaced under the same name is still noticed. The sink's and the source's
Python code call it in every worker they run in, so the tasks after the first
one in a reused worker no longer pay.
"""

from __future__ import annotations

import os
import sys
import threading
import zipimport

_lock = threading.Lock()
_installed = False


def _stamp(archive: str) -> tuple[int, int] | None:
    try:
        status = os.stat(archive)
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns


class SteadyZipImporter(zipimport.zipimporter):
    """A zip importer whose ``invalidate_caches`` re-reads the archive only if the file changed."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._stamp = _stamp(self.archive)

    def invalidate_caches(self) -> None:
        stamp = _stamp(self.archive)
        if stamp is None or stamp != self._stamp:
            super().invalidate_caches()
            self._stamp = stamp


def steady_zip_imports() -> bool:
    """Install :class:`SteadyZipImporter` in this process (idempotent); whether it is installed.

    Replaces the zip importer path hook and the zip importers already cached for
    entries of ``sys.path`` and package paths. Does nothing on CPython 3.13 and
    later, whose zip importers no longer re-read on invalidation.
    """
    global _installed
    if sys.version_info >= (3, 13):
        return False
    with _lock:
        if _installed:
            return True
        sys.path_hooks[:] = [
            SteadyZipImporter if hook is zipimport.zipimporter else hook for hook in sys.path_hooks
        ]
        for path, finder in list(sys.path_importer_cache.items()):
            if type(finder) is zipimport.zipimporter:
                try:
                    sys.path_importer_cache[path] = SteadyZipImporter(path)
                except zipimport.ZipImportError:
                    continue  # the archive is gone: leave the old finder to fail as it would
        _installed = True
        return True
