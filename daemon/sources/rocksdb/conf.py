"""The RocksDB provider's settings a reader must check before it trusts any file.

Spark records most state settings in each epoch's offset log conf (see
:mod:`epochlog`), but not ``spark.sql.streaming.stateStore.checkpointFormatVersion``:
format version 2 shows only in the commit log, whose entries then carry
``"stateUniqueIds"``, and in the names of the state files; :mod:`unique_ids`
resolves those.

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
LZ4_CODECS = frozenset({"lz4", "org.apache.spark.io.LZ4CompressionCodec"})


def check_rocksdb_conf(checkpoint: Checkpoint, *, avro: bool = False) -> str:
    """Check the newest planned epoch's settings; return the state compression codec
    (changelogs use it; refusing another codec is left to the changelog reader, since
    snapshots do not depend on it).

    ``avro``: whether the caller reads the Avro state encoding (Spark 4.0 writes it
    for transformWithState only).

    Raises:
        UnsupportedCheckpoint: another provider (names ``providerClass``), a row
            encoding other than ``unsaferow`` (or ``avro`` when allowed), or row
            checksums (``rowChecksum.enabled``, Spark 4.3).
        MissingCheckpointFile: no epoch planned yet.
    """
    planned = checkpoint.planned_epochs()
    if not planned:
        raise MissingCheckpointFile(f"{checkpoint.root}/offsets: no epoch planned yet")
    conf = checkpoint.epoch_log(planned[-1]).conf
    provider = conf.get(PROVIDER_CLASS_CONF, "")
    if provider != ROCKSDB_PROVIDER_CLASS:
        raise UnsupportedCheckpoint(
            f"{checkpoint.root}: {PROVIDER_CLASS_CONF}={provider or '<default>'}; "
            f"this reader reads {ROCKSDB_PROVIDER_CLASS}"
        )
    encoding = state_encoding(checkpoint)
    if encoding != "unsaferow" and not (avro and encoding == "avro"):
        readable = "unsaferow or avro" if avro else "unsaferow (avro: transformWithState only)"
        raise UnsupportedCheckpoint(
            f"{checkpoint.root}: {ENCODING_FORMAT_CONF}={encoding}; readable: {readable}"
        )
    if conf.get(ROW_CHECKSUM_CONF, "false") != "false":
        raise UnsupportedCheckpoint(f"{checkpoint.root}: {ROW_CHECKSUM_CONF}={conf[ROW_CHECKSUM_CONF]}")
    return conf.get(COMPRESSION_CODEC_CONF, "lz4")


def merge_delimiter(checkpoint: Checkpoint) -> bytes:
    """What the newest planned epoch's merge operator puts between list elements.

    Raises:
        UnsupportedCheckpoint: a merge operator version other than 1 or 2.
        MissingCheckpointFile: no epoch planned yet.
    """
    planned = checkpoint.planned_epochs()
    if not planned:
        raise MissingCheckpointFile(f"{checkpoint.root}/offsets: no epoch planned yet")
    version = checkpoint.epoch_log(planned[-1]).conf.get(MERGE_OPERATOR_VERSION_CONF, "1")
    if version not in _MERGE_DELIMITERS:
        raise UnsupportedCheckpoint(f"{checkpoint.root}: {MERGE_OPERATOR_VERSION_CONF}={version}")
    return _MERGE_DELIMITERS[version]


def state_encoding(checkpoint: Checkpoint) -> str:
    """The state row encoding of the newest planned epoch (``unsaferow`` or ``avro``).

    Raises:
        MissingCheckpointFile: no epoch planned yet.
    """
    planned = checkpoint.planned_epochs()
    if not planned:
        raise MissingCheckpointFile(f"{checkpoint.root}/offsets: no epoch planned yet")
    return checkpoint.epoch_log(planned[-1]).conf.get(ENCODING_FORMAT_CONF, "unsaferow")
