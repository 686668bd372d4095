"""The daemon's Unix socket: how clients on the same node reach it without TCP.

gRPC binds the socket; this module makes the path ready first and removes it on
a clean shutdown. A socket file left behind by a daemon that died is replaced; a
socket another process still accepts on is refused, as is a path that cannot hold
a socket (too long for ``sockaddr_un``, no such directory, an existing file that
is not a socket). Clients name it ``unix:///absolute/path`` (gRPC's own scheme).
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

from epochstate.core.errors import EpochStateError

# sockaddr_un.sun_path holds 108 bytes on Linux, the terminating NUL included.
MAX_PATH_BYTES = 107


class UnixSocketUnusable(EpochStateError):
    """The configured Unix socket path cannot be served on; set ``listen_unix`` to
    another path, or to "" for no Unix socket."""


def target(path: Path) -> str:
    """The gRPC target (and bind address) of the socket at ``path``."""
    return f"unix://{path.absolute()}"


def prepare(path: Path) -> str:
    """Make ``path`` ready for binding; returns the address to bind.

    Raises UnixSocketUnusable with the reason when it cannot be used.
    """
    path = path.absolute()
    size = len(os.fsencode(path))
    if size > MAX_PATH_BYTES:
        raise _unusable(path, f"the path is {size} bytes; a Unix socket path holds at most {MAX_PATH_BYTES}")
    if not path.parent.is_dir():
        raise _unusable(path, f"directory {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise _unusable(path, f"directory {path.parent} is not writable")
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return target(path)
    if not stat.S_ISSOCK(mode):
        raise _unusable(path, "a file that is not a socket is in the way")
    if _accepting(path):
        raise _unusable(path, "another process is serving on it")
    path.unlink()  # left by a daemon that did not shut down cleanly
    return target(path)


def remove(path: Path) -> None:
    """Remove the socket file (clean shutdown); nothing if it is gone or not a socket."""
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass


def _accepting(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError as error:
            raise _unusable(path, f"cannot tell whether it is in use: {error.strerror}") from error
        return True


def _unusable(path: Path, reason: str) -> UnixSocketUnusable:
    return UnixSocketUnusable(f"cannot serve on Unix socket {path}: {reason}")
