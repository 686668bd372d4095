"""The Unix socket with a check of the connecting process's user id (``SO_PEERCRED``).

grpcio does not show a handler the credentials of a Unix socket peer, so when
``auth.unix_peer_uids`` is set the daemon's gRPC server binds a socket in a
private directory (mode 0700, made under the system's temporary directory so the
path stays within a socket path's 107 bytes) and this module listens on the
public path: it
accepts each connection, reads the peer's user id from the kernel (which a
process cannot forge), closes the connection of any other user at once, and
relays the bytes of an allowed one to the private socket, one thread per
direction. Without the setting none of this runs: gRPC serves the public path
itself.

The relay costs a copy through this process per message; it is for clients on
the node, where that is cheaper than TLS, and only when the check is asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import tempfile
import threading
from collections.abc import Collection
from pathlib import Path

log = logging.getLogger(__name__)

_UCRED = struct.Struct("3i")  # pid, uid, gid
_CHUNK = 1 << 16


def private_path() -> Path:
    """A new place for gRPC to bind when the public socket is relayed, in a directory
    (mode 0700) only the daemon's user enters."""
    return Path(tempfile.mkdtemp(prefix="epochstate-")) / "grpc.sock"


def peer_uid(connection: socket.socket) -> int:
    """The user id of the process at the other end of a connected Unix socket."""
    _, uid, _ = _UCRED.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return int(uid)


class PeerCheckedSocket:
    """Listens on ``public``; relays connections of ``allowed`` user ids to ``private``.

    ``refused`` counts the connections closed for their user id.
    """

    def __init__(self, public: Path, private: Path, allowed: Collection[int], mode: int) -> None:
        self._public, self._private = public, private
        self._allowed = frozenset(allowed)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(public))
        os.chmod(public, mode)
        self._listener.listen(128)
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.refused = 0
        threading.Thread(target=self._accept, name="unix-peer-check", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            uid = peer_uid(connection)
            if uid not in self._allowed:
                self.refused += 1
                log.warning("Unix socket: refused a connection of user id %d (auth.unix_peer_uids)", uid)
                connection.close()
                continue
            threading.Thread(target=self._relay, args=(connection,), name="unix-relay", daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(str(self._private))
        except OSError as error:
            log.warning("Unix socket: cannot reach the server's socket: %s", error)
            client.close()
            upstream.close()
            return
        with self._lock:
            if self._closed:
                client.close()
                upstream.close()
                return
            self._connections |= {client, upstream}
        back = threading.Thread(target=self._pump, args=(upstream, client), name="unix-relay", daemon=True)
        back.start()
        self._pump(client, upstream)
        back.join()
        with self._lock:
            self._connections -= {client, upstream}
        client.close()
        upstream.close()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        try:
            while True:
                size = source.recv_into(buffer)
                if not size:
                    break
                sink.sendall(view[:size])
        except OSError:
            pass
        # The other direction ends too: its reader sees end of file or an error.
        for end in (sink, source):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting and end every relayed connection."""
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
