"""The RocksDB provider's settings a reader must check before it trusts any file.

Spark records most state settings in each epoch's offset log conf (see
:mod:`epochlog`), but not ``spark.sql.streaming.stateStore.checkpointFormatVersion``:
Spark 4.0 shows format version 2 only in the commit log, whose entries then carry
``"stateUniqueIds"`` (operator -> partition -> store -> the unique id of the store
version the epoch committed), and in the names of the state files.
"""

from __future__ import annotations

from epochstate.daemon.sources.checkpoint.checkpoint import (
    CHECKPOINT_FORMAT_CONF,
    COMPRESSION_CODEC_CONF,
    PROVIDER_CLASS_CONF,
    ROCKSDB_PROVIDER_CLASS,
    Checkpoint,
)
from epochstate.daemon.sources.errors import MissingCheckpointFile, UnsupportedCheckpoint

ENCODING_FORMAT_CONF = "spark.sql.streaming.stateStore.encodingFormat"
LZ4_CODECS = frozenset({"lz4", "org.apache.spark.io.LZ4CompressionCodec"})


def check_rocksdb_conf(checkpoint: Checkpoint, *, avro: bool = False) -> str:
    """Check the newest planned epoch's settings; return the state compression codec
    (changelogs use it; refusing another codec is left to the changelog reader, since
    snapshots do not depend on it).

    ``avro``: whether the caller reads the Avro state encoding (Spark 4.0 writes it
    for transformWithState only).

    Raises:
        UnsupportedCheckpoint: another provider (names ``providerClass``), a row
            encoding other than ``unsaferow`` (or ``avro`` when allowed), or
            checkpoint format version 2.
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
    if conf.get(CHECKPOINT_FORMAT_CONF, "1") != "1" or commits_carry_unique_ids(checkpoint):
        raise UnsupportedCheckpoint(f"{checkpoint.root}: {CHECKPOINT_FORMAT_CONF}=2 (state unique ids)")
    return conf.get(COMPRESSION_CODEC_CONF, "lz4")


def state_encoding(checkpoint: Checkpoint) -> str:
    """The state row encoding of the newest planned epoch (``unsaferow`` or ``avro``).

    Raises:
        MissingCheckpointFile: no epoch planned yet.
    """
    planned = checkpoint.planned_epochs()
    if not planned:
        raise MissingCheckpointFile(f"{checkpoint.root}/offsets: no epoch planned yet")
    return checkpoint.epoch_log(planned[-1]).conf.get(ENCODING_FORMAT_CONF, "unsaferow")


def commits_carry_unique_ids(checkpoint: Checkpoint) -> bool:
    """Whether the newest commit entry records state unique ids (format version 2)."""
    epoch = checkpoint.latest_committed()
    if epoch is None:
        return False
    try:
        text = (checkpoint.root / "commits" / str(epoch)).read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return False
    return '"stateUniqueIds"' in text
