"""The files of one store of Spark's RocksDB provider, as raw keys and values.

Store version ``v`` is the state after epoch ``v - 1``. Each partition directory
(see :meth:`Checkpoint.store_dir`) holds, for the versions not yet purged:

* ``<v>.changelog`` -- the puts, deletes (and, for list state, merges) of version
  ``v`` (see :mod:`rocksdb_changelog`), for every version while
  ``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled`` is on;
* ``<v>.zip`` -- the whole state at ``v`` (see :mod:`rocksdb_snapshot`): for every
  version while changelog checkpointing is off, and otherwise now and then, written
  by background maintenance once ``minDeltasForSnapshot`` changelogs piled up (and
  at once when a version creates a column family).

So version ``v`` is the newest zip at or below ``v`` plus the changelogs after it.
This module names and lists those files; :mod:`changelog_files` reads changelogs and
:mod:`store_files` rebuilds raw state from them; decoding is the readers' job.

With state checkpoint format version 2 the files are ``<v>_<uniqueId>.changelog``
and ``<v>_<uniqueId>.zip``, one pair per attempt; the committed attempt's id comes
from the commit log (see :mod:`unique_ids`), never from the directory listing, so
a failed attempt's files are never read. Such a changelog names, in its lineage,
the id of every version back to the snapshot its writer started from; version
``v`` is rebuilt along that lineage: the newest of its snapshots that exists, then
its changelogs in order.
"""

from __future__ import annotations

import re

from epochstate.core.storage.location import Location
from epochstate.daemon.sources.checkpoint.checkpoint import CHECKPOINT_FORMAT_CONF, Checkpoint
from epochstate.daemon.sources.errors import MissingStateFile, SourceError, UnsupportedCheckpoint
from epochstate.daemon.sources.rocksdb.unique_ids import CommittedIds

CHANGELOG = "changelog"
ZIP = "zip"
_STATE_FILE = re.compile(r"([0-9]+)(_[^.]+)?\.(changelog|zip)")  # ASCII digits: \d also matches "٣"


class StoreDirectory:
    """Where the state files of one store (every partition) are, and which exist.
    Nothing here reads a file's content but the commit log's unique ids.

    Every method taking a version finds its files by the committed attempt's unique
    id (format 2) or by the bare version (format 1), as the commit log says.
    ``single_store``: the operator has one physical store (transformWithState), which
    the commit log's ids are recorded for.
    """

    def __init__(
        self, checkpoint: Checkpoint, operator_id: int, store_name: str, *, single_store: bool
    ) -> None:
        self.checkpoint = checkpoint
        self.operator_id = operator_id
        self.store_name = store_name
        self.ids = CommittedIds(checkpoint, operator_id, store_name, single_store=single_store)

    def dir(self, partition: int) -> Location:
        return self.checkpoint.store_dir(self.operator_id, partition, self.store_name)

    def unique_id(self, partition: int, version: int) -> str | None:
        """The unique id of the committed ``version``'s files, ``None`` for format 1.

        Raises:
            MissingStateFile, CorruptCheckpointFile: see :meth:`CommittedIds.unique_id`.
        """
        return self.ids.unique_id(partition, version)

    def path(self, partition: int, version: int, kind: str, unique_id: str | None = None) -> Location:
        """The ``kind`` file of ``version``: of the attempt ``unique_id`` if given,
        else of the committed attempt.

        Raises:
            MissingStateFile, CorruptCheckpointFile: as for :meth:`unique_id`.
        """
        if unique_id is None:
            unique_id = self.unique_id(partition, version)
        name = f"{version}.{kind}" if unique_id is None else f"{version}_{unique_id}.{kind}"
        return self.dir(partition) / name

    def names(self, partition: int) -> list[str]:
        """The names in one partition's directory (none when it does not exist)."""
        try:
            return [p.name for p in self.dir(partition).iterdir()]
        except FileNotFoundError:
            return []

    def versions(self, partition: int, kind: str) -> list[int]:
        """The versions with a ``kind`` file named by the bare version (format 1), ascending."""
        return self.versions_in(self.names(partition), kind)

    @staticmethod
    def versions_in(names: list[str], kind: str) -> list[int]:
        """The versions with a ``kind`` file among ``names``, bare version names only."""
        versions = []
        for name in names:
            match = _STATE_FILE.fullmatch(name)
            if match is not None and not match.group(2) and match.group(3) == kind:
                versions.append(int(match.group(1)))
        return sorted(versions)

    def zip_names(self, partition: int) -> list[str]:
        """The names of every snapshot in the directory, of any attempt, newest version first."""
        found = []
        for name in self.names(partition):
            match = _STATE_FILE.fullmatch(name)
            if match is not None and match.group(3) == ZIP:
                found.append((int(match.group(1)), name))
        return [name for _, name in sorted(found, reverse=True)]

    def missing(self, partition: int, path: Location) -> SourceError:
        """The error for a state file ``path`` that does not exist: a format 1 name
        while the directory holds only files with unique ids means the commit log
        lost the ids (refused); otherwise it is missing."""
        if "_" not in path.name:
            names = [_STATE_FILE.fullmatch(n) for n in self.names(partition)]
            if any(m and m.group(2) for m in names) and not any(m and not m.group(2) for m in names):
                return UnsupportedCheckpoint(
                    f"{path}: does not exist, but state files with unique ids do "
                    f"({CHECKPOINT_FORMAT_CONF}=2) and the commit log records none"
                )
        return MissingStateFile(f"{path}: does not exist")
