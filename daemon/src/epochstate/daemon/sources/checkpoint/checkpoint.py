"""Read-only view of a Spark Structured Streaming checkpoint's state: operators, stores, schemas.

Layout this module relies on::

    <root>/metadata                    {"id": "<query id>"}
    <root>/offsets/<epoch>             planned epoch (see epochlog)
    <root>/commits/<epoch>             exists iff the epoch committed
    <root>/state/<op>/_metadata/metadata           operators (see operators)
    <root>/state/<op>/_metadata/v2/<batch>         transformWithState operators (see statevars)
    <root>/state/<op>/<partition>/[<store>/]       a store's files; "default" has no <store>/
    <root>/state/<op>/0/[<store>/]_metadata/schema key and value schemas (see schemafile)

Names starting with ``.`` (checksums, temporary files) or containing ``.tmp`` are
never read as log entries.

What is read is kept for the object's life, so following a job on an object store
costs few requests: log entries (never rewritten once written), and, until
:meth:`Checkpoint.forget_metadata`, the operators and store schemas. The commit
log is listed afresh on every call; the listing's sizes and times (free on object
stores) answer :meth:`Checkpoint.commit_time_ms` and tell, in
:attr:`Checkpoint.commits_rewritten`, when an entry already seen was written
again (the checkpoint was deleted and recreated). A recreated checkpoint needs a
new object.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from epochstate.core.checkpoint.commitlog import CommitEntry
from epochstate.core.checkpoint.epochlog import EpochLog
from epochstate.core.checkpoint.log import QueryLog, numeric_entries
from epochstate.core.sparktypes import StructType
from epochstate.core.storage.base import FileStat
from epochstate.core.storage.location import Location
from epochstate.daemon.sources.checkpoint.operators import (
    DEFAULT_STORE,
    METADATA_DIR,
    OperatorInfo,
    derive_operator,
    parse_operator_metadata,
)
from epochstate.daemon.sources.checkpoint.schemafile import parse_schema_file
from epochstate.daemon.sources.checkpoint.statevars import read_v2_operator, run_of
from epochstate.daemon.sources.errors import (
    MissingCheckpointFile,
    UnsupportedCheckpoint,
)

PROVIDER_CLASS_CONF = "spark.sql.streaming.stateStore.providerClass"
COMPRESSION_CODEC_CONF = "spark.sql.streaming.stateStore.compression.codec"
CHECKPOINT_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
# The number of partitions of every state store at an epoch (Spark pins it per epoch).
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
# Spark 4.3: a checksum with every stored row, a layout the readers do not know.
ROW_CHECKSUM_CONF = "spark.sql.streaming.stateStore.rowChecksum.enabled"
HDFS_PROVIDER_CLASS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER_CLASS = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
ProviderKind = Literal["hdfs", "rocksdb"]
_LZ4_CODECS = frozenset({"lz4", "org.apache.spark.io.LZ4CompressionCodec"})


class Checkpoint(QueryLog):
    """A checkpoint directory: the query's logs (:class:`QueryLog`) and its state
    operators, stores and schemas. Not thread-safe (one ingest thread uses it)."""

    def __init__(self, root: Location | Path | str) -> None:
        super().__init__(root)
        self._epoch_logs: dict[int, EpochLog] = {}
        self._commit_entries: dict[int, CommitEntry] = {}
        # The newest listing of commits/ (stats only from object stores), and its
        # stats, which the next listing is compared with.
        self._listed: dict[int, FileStat | None] = {}
        self._previous_listing: dict[int, FileStat] = {}
        self.commits_rewritten = False
        # The operators as the newest runs have them (key None), and as older runs do,
        # keyed by each transformWithState operator's run (its _metadata/v2 entry).
        self._operators: dict[tuple[tuple[int, int], ...] | None, list[OperatorInfo]] = {}
        self._schemas: dict[tuple[int, str], tuple[StructType, StructType]] = {}
        # Per transformWithState operator: its _metadata/v2 entries, and its state
        # variables' schemas per (operator, variable, run).
        self._v2_batches: dict[int, list[int]] = {}
        self._variable_schemas: dict[tuple[int, str, int], tuple[StructType, StructType]] = {}
        # What the kept schemas were read from: a schema file's tag (once compared)
        # and MD5 (S3 tags a file written in one piece with it), and per
        # transformWithState operator its newest _metadata/v2 entry.
        self._schema_tags: dict[tuple[int, str], str] = {}
        self._schema_md5: dict[tuple[int, str], str] = {}
        self._v2_newest: dict[int, int] = {}

    # Logs, read once.

    def committed_epochs(self) -> list[int]:
        """The committed epochs, ascending: one listing of ``commits/``. Sets
        :attr:`commits_rewritten` when an entry listed before now has another size,
        tag or time, or is gone while later ones are listed."""
        listed: dict[int, FileStat | None] = {}
        for entry in (self.root / "commits").iterdir():
            if entry.name.isdigit() and entry.name.isascii():
                listed[int(entry.name)] = entry.listed_stat
        oldest = min(listed, default=None)
        for epoch, seen in self._previous_listing.items():
            now = listed.get(epoch)
            if now is None:
                gone = oldest is not None and epoch > oldest  # purged entries go oldest first
                self.commits_rewritten |= gone
            elif (now.st_size, now.tag, now.st_mtime_ns) != (seen.st_size, seen.tag, seen.st_mtime_ns):
                self.commits_rewritten = True
        self._previous_listing = {e: s for e, s in listed.items() if s is not None}
        self._listed = listed
        return sorted(listed)

    def listed(self, epoch: int) -> bool:
        """Whether the newest listing of ``commits/`` had ``epoch``."""
        return epoch in self._listed

    def read_ahead_epoch_log(self, epoch: int) -> None:
        """Start reading ``offsets/<epoch>`` unless it was read (see :meth:`Storage.read_ahead`)."""
        if epoch not in self._epoch_logs:
            path = self.root / "offsets" / str(epoch)
            path.storage.read_ahead(path.path)

    def commit_size(self, epoch: int) -> int | None:
        """The size of ``commits/<epoch>`` as last listed, if the listing gave it."""
        stat = self._listed.get(epoch)
        return None if stat is None else stat.st_size

    def commit_time_ms(self, epoch: int) -> int:
        stat = self._listed.get(epoch)
        if stat is not None:
            return stat.st_mtime_ns // 1_000_000
        return super().commit_time_ms(epoch)

    def epoch_log(self, epoch: int) -> EpochLog:
        log = self._epoch_logs.get(epoch)
        if log is None:
            log = self._epoch_logs[epoch] = super().epoch_log(epoch)
        return log

    def commit_entry(self, epoch: int) -> CommitEntry:
        entry = self._commit_entries.get(epoch)
        if entry is None:
            entry = self._commit_entries[epoch] = super().commit_entry(epoch)
        return entry

    def forget_metadata(self) -> None:
        """Read the operators and schemas afresh next time (a new run of the query
        may have changed them)."""
        self._operators.clear()
        self._schemas.clear()
        self._variable_schemas.clear()
        self._v2_batches.clear()
        self._schema_tags.clear()
        self._schema_md5.clear()
        self._v2_newest.clear()

    def metadata_changed(self) -> bool:
        """Whether a kept schema may be out of date, told cheaply and by content: one
        HEAD per store's schema file (a tag not seen before: its content is read and
        compared) and, per transformWithState operator, one listing of its
        ``_metadata/v2`` (a new run writes a new entry there). A schema file that is
        gone (removed for the next run to write anew) changes nothing yet.

        Raises:
            CorruptCheckpointFile, UnsupportedCheckpoint: a malformed schema file.
        """
        for op_id, newest in self._v2_newest.items():
            batches = numeric_entries(self.root / "state" / str(op_id) / METADATA_DIR / "v2")
            if batches[-1:] != [newest]:
                return True
        for (op_id, store), schema in list(self._schemas.items()):
            if op_id in self._v2_newest:
                continue
            path = self.store_dir(op_id, 0, store) / METADATA_DIR / "schema"
            try:
                tag = path.stat().tag
                known = (self._schema_tags.get((op_id, store)), f'"{self._schema_md5.get((op_id, store))}"')
                if tag in known:
                    self._schema_tags[(op_id, store)] = tag
                    continue
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            if parse_schema_file(data, str(path)) != schema:
                return True
            self._schema_tags[(op_id, store)] = tag
        return False

    # Configuration.

    def epoch_conf(self, epoch: int | None = None) -> dict[str, str]:
        """The settings Spark pinned in ``epoch``'s offset log entry (``None``: the newest
        planned epoch's).

        Raises:
            MissingCheckpointFile: no epoch planned yet, or ``epoch``'s entry is gone.
        """
        if epoch is None:
            planned = self.planned_epochs()
            if not planned:
                raise MissingCheckpointFile(f"{self.root}/offsets: no epoch planned yet")
            epoch = planned[-1]
        return self.epoch_log(epoch).conf

    def state_partitions(self, epoch: int) -> int | None:
        """The number of Spark partitions of every state store at ``epoch``, as Spark
        plans it: the shuffle partitions pinned in the epoch's offset log entry. An
        offline repartition (Spark 4.2+) changes it at its repartition batch, while the
        operator metadata keeps the count the stores were first written with. None when
        the entry does not record it (the operator metadata's count then holds).

        Raises:
            MissingCheckpointFile, CorruptCheckpointFile, UnsupportedCheckpoint: the
                epoch's offset log entry cannot be read.
        """
        raw = self.epoch_log(epoch).conf.get(SHUFFLE_PARTITIONS_CONF)
        if raw is None:
            return None
        try:
            count = int(raw)
        except ValueError:
            count = 0
        if count < 1:
            raise UnsupportedCheckpoint(f"{self.root}/offsets/{epoch}: {SHUFFLE_PARTITIONS_CONF}={raw!r}")
        return count

    def provider_class(self, epoch: int | None = None) -> str:
        """The state store provider class the query runs with (recorded per epoch;
        ``None``: the newest planned epoch). Spark's default when not recorded.

        Raises:
            MissingCheckpointFile: no offset log entry to read it from.
        """
        return self.epoch_conf(epoch).get(PROVIDER_CLASS_CONF, HDFS_PROVIDER_CLASS)

    def provider_kind(self, epoch: int | None = None) -> ProviderKind:
        """Which of the two providers we read wrote the state (``None``: the newest
        planned epoch). Their format options are checked by the readers.

        Raises:
            UnsupportedCheckpoint: any other provider class.
            MissingCheckpointFile: no offset log entry to read the configuration from.
        """
        provider = self.provider_class(epoch)
        if provider == HDFS_PROVIDER_CLASS:
            return "hdfs"
        if provider == ROCKSDB_PROVIDER_CLASS:
            return "rocksdb"
        raise UnsupportedCheckpoint(
            f"{self.root}: {PROVIDER_CLASS_CONF}={provider}; readable are "
            f"{HDFS_PROVIDER_CLASS} and {ROCKSDB_PROVIDER_CLASS}"
        )

    def ensure_hdfs_backed(self, epoch: int | None = None) -> None:
        """Check that the state is in the HDFS-backed provider's format we read.

        Raises:
            UnsupportedCheckpoint: another provider (e.g. RocksDB), a state compression
                codec other than lz4, a state checkpoint format version other than 1, or
                row checksums.
            MissingCheckpointFile: no offset log entry to read the configuration from.
        """
        conf = self.epoch_conf(epoch)
        provider = conf.get(PROVIDER_CLASS_CONF, HDFS_PROVIDER_CLASS)
        if provider != HDFS_PROVIDER_CLASS:
            raise UnsupportedCheckpoint(
                f"{self.root}: {PROVIDER_CLASS_CONF}={provider}; only {HDFS_PROVIDER_CLASS} is readable"
            )
        codec = conf.get(COMPRESSION_CODEC_CONF, "lz4")
        if codec not in _LZ4_CODECS:
            raise UnsupportedCheckpoint(
                f"{self.root}: {COMPRESSION_CODEC_CONF}={codec}; only lz4 is readable"
            )
        version = conf.get(CHECKPOINT_FORMAT_CONF, "1")
        if version != "1":
            raise UnsupportedCheckpoint(f"{self.root}: {CHECKPOINT_FORMAT_CONF}={version}")
        if conf.get(ROW_CHECKSUM_CONF, "false") != "false":
            raise UnsupportedCheckpoint(f"{self.root}: {ROW_CHECKSUM_CONF}={conf[ROW_CHECKSUM_CONF]}")

    # Operators and stores.

    def operators(self, epoch: int | None = None) -> list[OperatorInfo]:
        """The stateful operators, by id, as the run that planned ``epoch`` has them
        (``None``: the newest run). From each operator's metadata file (v1, or v2 for
        transformWithState, whose stores are the state variables of ``epoch``'s run),
        else from the directory layout (then names are ``None``). Kept until
        :meth:`forget_metadata`.

        Raises:
            CorruptCheckpointFile, UnsupportedCheckpoint: a malformed metadata file.
            MissingCheckpointFile: a schema file the v2 metadata names is gone.
        """
        newest = self._operators.get(None)
        if newest is None:
            newest = self._operators[None] = self._read_operators(None)
        if epoch is None:
            return list(newest)
        runs = tuple(
            (op, run_of(batches, epoch)) for op, batches in sorted(self._v2_batches.items()) if batches
        )
        if all(run == self._v2_batches[op][-1] for op, run in runs):
            return list(newest)
        found = self._operators.get(runs)
        if found is None:
            found = self._operators[runs] = self._read_operators(epoch)
        return list(found)

    def _v2_listing(self, operator_id: int) -> list[int]:
        """The operator's ``_metadata/v2`` entries (none: not transformWithState), one
        listing until :meth:`forget_metadata`."""
        batches = self._v2_batches.get(operator_id)
        if batches is None:
            op_dir = self.root / "state" / str(operator_id)
            batches = self._v2_batches[operator_id] = numeric_entries(op_dir / METADATA_DIR / "v2")
        return batches

    def _read_operators(self, epoch: int | None) -> list[OperatorInfo]:
        state = self.root / "state"
        result = []
        for op_id in numeric_entries(state):
            op_dir = state / str(op_id)
            meta = op_dir / METADATA_DIR / "metadata"
            if meta.is_file():
                result.append(parse_operator_metadata(op_id, self._read_text(meta), str(meta)))
            elif self._v2_listing(op_id):
                result.append(read_v2_operator(op_id, op_dir, epoch))
            else:
                result.append(derive_operator(op_id, op_dir))
        return result

    def store_dir(self, operator_id: int, partition: int, store: str = DEFAULT_STORE) -> Location:
        """The directory of one partition of a store (it need not exist)."""
        path = self.root / "state" / str(operator_id) / str(partition)
        return path if store == DEFAULT_STORE else path / store

    def store_schema(
        self, operator_id: int, store: str = DEFAULT_STORE, epoch: int | None = None
    ) -> tuple[StructType, StructType]:
        """``(key schema, value schema)`` of a store, from partition 0's schema file;
        for a transformWithState state variable, as :mod:`statevars` serves it at
        ``epoch`` (``None``: the newest run). Kept until :meth:`forget_metadata`.

        Raises:
            MissingCheckpointFile: no schema file (unknown operator/store, or a format
                that keeps schemas elsewhere).
            CorruptCheckpointFile, UnsupportedCheckpoint: see :func:`parse_schema_file`.
        """
        known = self._schemas.get((operator_id, store))
        if known is None:
            op_dir = self.root / "state" / str(operator_id)
            batches = self._v2_listing(operator_id)
            if batches:
                self._v2_newest[operator_id] = batches[-1]
                run = batches[-1] if epoch is None else run_of(batches, epoch)
                variable = self._variable_schemas.get((operator_id, store, run))
                if variable is not None:
                    return variable
                for info in read_v2_operator(operator_id, op_dir, run).stores:
                    if info.name == store and info.variable is not None:
                        variable = info.variable.key_schema, info.variable.value_schema
                        self._variable_schemas[(operator_id, store, run)] = variable
                        return variable
            known = self._schemas[(operator_id, store)] = self._read_store_schema(operator_id, store)
        return known

    def _read_store_schema(self, operator_id: int, store: str) -> tuple[StructType, StructType]:
        path = self.store_dir(operator_id, 0, store) / METADATA_DIR / "schema"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise MissingCheckpointFile(f"{path}: no schema for store {store!r}") from None
        self._schema_md5[(operator_id, store)] = hashlib.md5(data, usedforsecurity=False).hexdigest()
        return parse_schema_file(data, str(path))
