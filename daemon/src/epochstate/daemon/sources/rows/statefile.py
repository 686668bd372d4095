"""Records of a decompressed HDFS-backed state file (``.delta`` or ``.snapshot``).

The content is a ``java.io.DataOutputStream`` sequence of records, big-endian::

    int32 keySize, key bytes, int32 valueSize, value bytes     (a put)
    int32 keySize, key bytes, int32 -1                         (a removal; deltas only)
    int32 -1                                                   (end of file)

Key and value bytes are UnsafeRows. Within one delta a key may appear several
times; the last record wins.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from epochstate.daemon.sources.errors import CorruptStateFile

StateRecord = tuple[bytes, bytes | None]
"""``(key bytes, value bytes)``; the value is ``None`` when the key was removed."""

_INT = struct.Struct(">i")
_END = -1


def iter_records(
    content: bytes, source: str = "<bytes>", allow_removals: bool = True
) -> Iterator[StateRecord]:
    """Yield the records of a decompressed state file, in file order.

    ``allow_removals`` is false for snapshots, which hold only puts.

    Raises:
        CorruptStateFile: a negative size other than the markers, a removal in a
            snapshot, data that ends before the end marker, or bytes after it. The
            message gives ``source`` and the byte offset of the bad record.
    """
    unpack = _INT.unpack_from
    total = len(content)
    pos = 0
    while True:
        if pos + 4 > total:
            raise CorruptStateFile(f"{source}: offset {pos}: ends without the end marker")
        (key_size,) = unpack(content, pos)
        if key_size < 0:
            if key_size != _END:
                raise CorruptStateFile(f"{source}: offset {pos}: negative key size {key_size}")
            if pos + 4 != total:
                raise CorruptStateFile(
                    f"{source}: offset {pos}: {total - pos - 4} bytes after the end marker"
                )
            return
        key_end = pos + 4 + key_size
        if key_end + 4 > total:
            raise CorruptStateFile(f"{source}: offset {pos}: truncated record")
        (value_size,) = unpack(content, key_end)
        key = content[pos + 4 : key_end]
        if value_size < 0:
            if value_size != _END:
                raise CorruptStateFile(f"{source}: offset {pos}: negative value size {value_size}")
            if not allow_removals:
                raise CorruptStateFile(f"{source}: offset {pos}: removal in a snapshot")
            yield key, None
            pos = key_end + 4
            continue
        value_end = key_end + 4 + value_size
        if value_end > total:
            raise CorruptStateFile(f"{source}: offset {pos}: truncated record")
        yield key, content[key_end + 4 : value_end]
        pos = value_end
