"""Byte layout of the one RocksDB keyspace the daemon keeps.

Everything lives in one column family, so one RocksDB snapshot gives a consistent
view of data *and* markers (a read checks the retained epoch range and reads the
versions from the same snapshot). Integers are big-endian so they sort.

=========================================  =======================================
key                                        value
=========================================  =======================================
``d`` store_id key ~epoch                  a version: tombstone, or live + payload
``g`` job_id epoch chunk                   data keys (each length-prefixed) that are
                                           garbage once the oldest retained epoch
                                           is >= epoch
``c`` store_id epoch chunk                 the keys (each length-prefixed, in key order)
                                           the epoch gave a version or a tombstone:
                                           its changes, without a walk over the store
``e`` job_id epoch                         the epoch's record (JSON)
``p`` job_id                               progress: newest, oldest epoch
``J`` job name                             job descriptor (JSON; with the Spark
                                           partitions its data covers, when not all)
``S`` store_id                             store descriptor (JSON)
``s`` store_id first_epoch                 a later shape of the store (JSON)
``u`` job_id epoch                         an epoch that will never be served: why
``x`` job_id                               a dropped job (JSON): reads of it are refused
``n`` job_id                               what ingest knows of the job beyond its
                                           epochs (JSON): the newest committed epoch
                                           seen, the epochs it is retrying and why
``I``                                      the highest job and store ids ever given
``V``                                      the layout's version (:data:`LAYOUT_VERSION`)
=========================================  =======================================

``~epoch`` is ``2**64 - 1 - epoch``, so a key's newest version comes first and
"newest version <= e" is one seek.
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

DATA = b"d"
GARBAGE = b"g"
CHANGED = b"c"
EPOCH = b"e"
PROGRESS = b"p"
JOB = b"J"
STORE = b"S"
SCHEMA = b"s"
UNAVAILABLE = b"u"
LAYOUT = b"V"
DROPPED = b"x"
NOTES = b"n"
IDS = b"I"

LAYOUT_VERSION = 4
"""Bumped whenever a key or value above changes meaning. 1: one garbage entry per
superseded data key (no ``V`` key); 2: garbage keys packed into chunks. The ``x``
and ``I`` keys came later within 2, the ``n`` key within 4: a daemon that does not
know them ignores them.
3: a job descriptor may name the partitions its data covers (a daemon of layout 2
would take such a job's data for the whole job, and answer "absent" for keys of
the partitions it lacks). 4: a store's later shapes (``s``) name their number of
Spark partitions (a daemon of layout 3 would read every epoch with the first count).
The ``c`` keys came later within 4: a daemon that does not know them ignores them,
and an epoch without them (written by such a daemon) is read by a walk over the store."""

UPGRADES_FROM = frozenset({"2", "3"})
"""Layout versions a store is read as, and restamped with, :data:`LAYOUT_VERSION`
without a change to its data: a layout 2 job descriptor names no partitions, which
in layout 3 means the whole job, as it did; a layout 3 shape names no partition
count, which in layout 4 means the count of the shape before it, as it was."""

_ID = struct.Struct(">I")
_EPOCH = struct.Struct(">Q")
_PROGRESS = struct.Struct(">qq")
_IDS = struct.Struct(">II")
_MAX = (1 << 64) - 1
EPOCH_WIDTH = _EPOCH.size

TOMBSTONE = b"\x00"
LIVE = b"\x01"


def data_prefix(store_id: int) -> bytes:
    return DATA + _ID.pack(store_id)


def data_key(store_id: int, encoded_key: bytes, epoch: int) -> bytes:
    return DATA + _ID.pack(store_id) + encoded_key + _EPOCH.pack(_MAX - epoch)


def epoch_suffix(epoch: int) -> bytes:
    return _EPOCH.pack(_MAX - epoch)


def epochs_of_suffixes(suffixes: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """The epochs of many :func:`epoch_suffix` values (read as big-endian integers)."""
    return (np.uint64(_MAX) - suffixes).astype(np.int64)


def split_data_key(raw: bytes) -> tuple[bytes, int]:
    """``(store_id prefix + encoded key, epoch)`` of a data key."""
    return raw[:-EPOCH_WIDTH], _MAX - _EPOCH.unpack(raw[-EPOCH_WIDTH:])[0]


def garbage_prefix(job_id: int) -> bytes:
    return GARBAGE + _ID.pack(job_id)


def garbage_key(job_id: int, epoch: int, chunk: int) -> bytes:
    return GARBAGE + _ID.pack(job_id) + _EPOCH.pack(epoch) + _ID.pack(chunk)


def garbage_epoch(raw: bytes) -> int:
    """The epoch of a garbage key."""
    head = len(GARBAGE) + _ID.size
    return int(_EPOCH.unpack(raw[head : head + EPOCH_WIDTH])[0])


def pack_keys(keys: list[bytes]) -> bytes:
    """Data keys as one garbage value: each as a uint32 length and its bytes."""
    pack = _ID.pack
    return b"".join([pack(len(k)) + k for k in keys])


def unpack_keys(raw: bytes) -> list[bytes]:
    """The data keys of a garbage value (see :func:`pack_keys`)."""
    keys, pos, unpack = [], 0, _ID.unpack_from
    while pos < len(raw):
        (size,) = unpack(raw, pos)
        keys.append(raw[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return keys


def changed_prefix(store_id: int, epoch: int | None = None) -> bytes:
    """The change index of a store, or of one epoch of it."""
    head = CHANGED + _ID.pack(store_id)
    return head if epoch is None else head + _EPOCH.pack(epoch)


def changed_key(store_id: int, epoch: int, chunk: int) -> bytes:
    return CHANGED + _ID.pack(store_id) + _EPOCH.pack(epoch) + _ID.pack(chunk)


def changed_epoch(raw: bytes) -> int:
    """The epoch of a change index key."""
    head = len(CHANGED) + _ID.size
    return int(_EPOCH.unpack(raw[head : head + EPOCH_WIDTH])[0])


def epoch_key(job_id: int, epoch: int) -> bytes:
    return EPOCH + _ID.pack(job_id) + _EPOCH.pack(epoch)


def epoch_prefix(job_id: int) -> bytes:
    return EPOCH + _ID.pack(job_id)


def epoch_of_epoch_key(raw: bytes) -> int:
    return int(_EPOCH.unpack(raw[-EPOCH_WIDTH:])[0])


def notes_key(job_id: int) -> bytes:
    return NOTES + _ID.pack(job_id)


def progress_key(job_id: int) -> bytes:
    return PROGRESS + _ID.pack(job_id)


def pack_progress(newest: int, oldest: int) -> bytes:
    return _PROGRESS.pack(newest, oldest)


def unpack_progress(raw: bytes) -> tuple[int, int]:
    newest, oldest = _PROGRESS.unpack(raw)
    return int(newest), int(oldest)


def dropped_key(job_id: int) -> bytes:
    return DROPPED + _ID.pack(job_id)


def dropped_job_id(raw: bytes) -> int:
    """The job id of a dropped-job key."""
    return int(_ID.unpack(raw[len(DROPPED) :])[0])


def pack_ids(job_id: int, store_id: int) -> bytes:
    return _IDS.pack(job_id, store_id)


def unpack_ids(raw: bytes) -> tuple[int, int]:
    job_id, store_id = _IDS.unpack(raw)
    return int(job_id), int(store_id)


def job_key(name: str) -> bytes:
    return JOB + name.encode("utf-8")


def store_key(store_id: int) -> bytes:
    return STORE + _ID.pack(store_id)


def schema_prefix(store_id: int) -> bytes:
    return SCHEMA + _ID.pack(store_id)


def schema_key(store_id: int, first_epoch: int) -> bytes:
    return SCHEMA + _ID.pack(store_id) + _EPOCH.pack(first_epoch)


def unavailable_prefix(job_id: int) -> bytes:
    return UNAVAILABLE + _ID.pack(job_id)


def unavailable_key(job_id: int, epoch: int) -> bytes:
    return UNAVAILABLE + _ID.pack(job_id) + _EPOCH.pack(epoch)


def parse_version(raw: bytes) -> bytes | None:
    """The payload of a live version, or None for a tombstone."""
    if raw[:1] == TOMBSTONE:
        return None
    return raw[1:]


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
