"""The RocksDB provider's settings a reader must check before it trusts any file.

Spark records most state settings in each epoch's offset log conf (see
:mod:`epochlog`), and the settings read here are checked against the conf of the
epoch being read, never another's: a setting a later run changes must not change
how earlier epochs are judged. Spark pins these settings for the life of a
checkpoint (its offset log's ``relevantSQLConfs``: a later run's value is replaced
by the checkpoint's, and one the checkpoint lacks takes its legacy default), so a
purged offset log entry may be stood in for by the oldest one still there.

``spark.sql.streaming.stateStore.checkpointFormatVersion`` is not recorded in the
offset log: format version 2 shows only in the commit log, whose entries then carry
``"stateUniqueIds"``, and in the names of the state files; :mod:`unique_ids`
resolves those per version.

``spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion`` (Spark 4.1+; the
default for new queries is 2, a checkpoint without it is version 1) picks the
delimiter RocksDB's string-append merge puts between list state elements: ``,``
under version 1, nothing under version 2.
"""

from __future__ import annotations

from epochstate.daemon.sources.checkpoint.checkpoint import (
    COMPRESSION_CODEC_CONF,
    PROVIDER_CLASS_CONF,
    ROCKSDB_PROVIDER_CLASS,
    ROW_CHECKSUM_CONF,
    Checkpoint,
)
from epochstate.daemon.sources.errors import MissingCheckpointFile, UnsupportedCheckpoint

ENCODING_FORMAT_CONF = "spark.sql.streaming.stateStore.encodingFormat"
MERGE_OPERATOR_VERSION_CONF = "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"
_MERGE_DELIMITERS = {"1": b",", "2": b""}


def check_rocksdb_conf(checkpoint: Checkpoint, epoch: int | None = None, *, avro: bool = False) -> str:
    """Check ``epoch``'s settings (``None``: the newest planned epoch's); return its state
    compression codec (changelogs use it; refusing another codec is left to the
    changelog reader, since snapshots do not depend on it).

    ``avro``: whether the caller reads the Avro state encoding (Spark 4.0 writes it
    for transformWithState only).

    Raises:
        UnsupportedCheckpoint: another provider (names ``providerClass``), a row
            encoding other than ``unsaferow`` (or ``avro`` when allowed), or row
            checksums (``rowChecksum.enabled``, Spark 4.3).
        MissingCheckpointFile: no epoch planned yet, or ``epoch``'s entry is gone.
    """
    where = str(checkpoint.root) if epoch is None else f"{checkpoint.root} epoch {epoch}"
    return _checked(checkpoint.epoch_conf(epoch), where, avro)


def check_version_conf(checkpoint: Checkpoint, version: int, *, avro: bool = False) -> str:
    """:func:`check_rocksdb_conf` for store version ``version`` (``>= 1``): the settings
    of the epoch that wrote it (``version - 1``), or, that offset log entry purged, of
    the oldest entry left (Spark pins them for the checkpoint's life; see the module
    docstring). Returns the codec of the version's changelog.

    Raises:
        UnsupportedCheckpoint: as for :func:`check_rocksdb_conf`.
        MissingCheckpointFile: the checkpoint has no offset log entry at all.
    """
    epoch = version - 1
    try:
        conf = checkpoint.epoch_conf(epoch)
    except MissingCheckpointFile:
        planned = checkpoint.planned_epochs()
        if not planned:
            raise
        epoch = planned[0]
        conf = checkpoint.epoch_conf(epoch)
    return _checked(conf, f"{checkpoint.root} epoch {epoch}", avro)


def _checked(conf: dict[str, str], where: str, avro: bool) -> str:
    provider = conf.get(PROVIDER_CLASS_CONF, "")
    if provider != ROCKSDB_PROVIDER_CLASS:
        raise UnsupportedCheckpoint(
            f"{where}: {PROVIDER_CLASS_CONF}={provider or '<default>'}; "
            f"this reader reads {ROCKSDB_PROVIDER_CLASS}"
        )
    encoding = conf.get(ENCODING_FORMAT_CONF, "unsaferow")
    if encoding != "unsaferow" and not (avro and encoding == "avro"):
        readable = "unsaferow or avro" if avro else "unsaferow (avro: transformWithState only)"
        raise UnsupportedCheckpoint(f"{where}: {ENCODING_FORMAT_CONF}={encoding}; readable: {readable}")
    if conf.get(ROW_CHECKSUM_CONF, "false") != "false":
        raise UnsupportedCheckpoint(
            f"{where}: {ROW_CHECKSUM_CONF}={conf[ROW_CHECKSUM_CONF]}; rows with checksums are not read"
        )
    return conf.get(COMPRESSION_CODEC_CONF, "lz4")


def merge_delimiter(checkpoint: Checkpoint, epoch: int | None = None) -> bytes:
    """What ``epoch``'s merge operator (``None``: the newest planned epoch's) puts between
    list elements.

    Raises:
        UnsupportedCheckpoint: a merge operator version other than 1 or 2.
        MissingCheckpointFile: no epoch planned yet, or ``epoch``'s entry is gone.
    """
    version = checkpoint.epoch_conf(epoch).get(MERGE_OPERATOR_VERSION_CONF, "1")
    if version not in _MERGE_DELIMITERS:
        raise UnsupportedCheckpoint(f"{checkpoint.root}: {MERGE_OPERATOR_VERSION_CONF}={version}")
    return _MERGE_DELIMITERS[version]


def state_encoding(checkpoint: Checkpoint, epoch: int | None = None) -> str:
    """The state row encoding of ``epoch`` (``None``: the newest planned epoch):
    ``unsaferow`` or ``avro``.

    Raises:
        MissingCheckpointFile: no epoch planned yet, or ``epoch``'s entry is gone.
    """
    return checkpoint.epoch_conf(epoch).get(ENCODING_FORMAT_CONF, "unsaferow")
