"""Opening a RocksDB snapshot ``<version>.zip`` as Spark writes it, and nothing else.

Spark writes the zip with ``java.util.zip.ZipOutputStream``: entries deflated (or
stored), never encrypted, flat names, a few small files (``metadata``, ``CURRENT``,
``MANIFEST-<n>``, ``OPTIONS-<n>``, an empty WAL); the table files live beside the
zip. :func:`open_snapshot_zip` checks exactly that from the central directory
before any entry is read, so a damaged or hostile zip is refused as
:class:`CorruptStateFile` instead of reaching a decompressor we never need
(bzip2, LZMA: their data errors are bare ``OSError``\\ s and ``LZMAError``\\ s) or
filling a disk (a deflated entry expands up to ~1,000 times).
"""

from __future__ import annotations

import errno
import lzma
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from epochstate.core.storage.location import Location
from epochstate.daemon.sources.errors import CorruptStateFile, MissingStateFile

# The entries of every snapshot zip of Spark's, uncompressed, stay far below this:
# they are the database's small files, not its table files.
MAX_UNCOMPRESSED_BYTES = 1 << 30

_SPARK_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})
_ENCRYPTED_FLAG = 0x1

# What zipfile raises on a damaged archive: bad structure, CRC-32 mismatch, a
# truncated or corrupt deflate stream, a bad name encoding.
_UNREADABLE_ZIP = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    ValueError,
    NotImplementedError,
    RuntimeError,
)


@contextmanager
def zip_errors(zip_path: Location) -> Iterator[None]:
    """Reading a snapshot zip inside: a missing zip raises MissingStateFile, an
    unreadable one (bad structure, CRC-32 mismatch, an entry offset outside the
    file) CorruptStateFile."""
    try:
        yield
    except FileNotFoundError:
        raise MissingStateFile(f"{zip_path}: does not exist") from None
    except _UNREADABLE_ZIP as err:
        raise CorruptStateFile(f"{zip_path}: not a readable zip: {err}") from err
    except OSError as err:
        if err.errno != errno.EINVAL:  # a real I/O error is not the zip's fault
            raise
        # A seek before the start of the file: an entry offset that is negative.
        raise CorruptStateFile(f"{zip_path}: not a readable zip: {err}") from err


@contextmanager
def open_snapshot_zip(
    zip_path: Location,
    content: IO[bytes] | None = None,
    max_uncompressed_bytes: int = MAX_UNCOMPRESSED_BYTES,
) -> Iterator[zipfile.ZipFile]:
    """The zip at ``zip_path`` (or its bytes ``content``, when already read), checked
    to be one Spark could have written; reading its entries inside the block raises
    domain errors only, as :func:`zip_errors` maps them.

    Raises:
        MissingStateFile: no such file.
        CorruptStateFile: a damaged zip; an entry with a path, encrypted, or
            compressed with a method Spark never uses; entries that would expand
            beyond ``max_uncompressed_bytes``.
    """
    with zip_errors(zip_path), zipfile.ZipFile(content or zip_path.local_path()) as archive:
        total = 0
        for info in archive.infolist():
            plain_entry_name(info.filename, str(zip_path))
            if info.compress_type not in _SPARK_METHODS:
                raise CorruptStateFile(
                    f"{zip_path}: entry {info.filename!r} uses compression method "
                    f"{info.compress_type}, which Spark never writes"
                )
            if info.flag_bits & _ENCRYPTED_FLAG:
                raise CorruptStateFile(f"{zip_path}: entry {info.filename!r} is encrypted")
            total += info.file_size
        if total > max_uncompressed_bytes:
            raise CorruptStateFile(
                f"{zip_path}: entries of {total} bytes uncompressed, above the "
                f"{max_uncompressed_bytes} a snapshot zip of Spark's can hold"
            )
        yield archive


def plain_entry_name(name: object, source: str) -> str:
    """``name`` if it is a plain file name (no directory, not ``.`` or ``..``).

    Raises:
        CorruptStateFile: anything else.
    """
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        raise CorruptStateFile(f"{source}: bad file name {name!r}")
    return name
