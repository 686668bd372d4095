"""A TCP proxy on loopback that a test can cut, as a network partition cuts a daemon off ZooKeeper."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class CutProxy:
    """Forwards connections from a free loopback port to ``host:port``.

    :meth:`cut` closes every forwarded connection and closes each new one at once,
    until :meth:`restore`: the client behind it loses ZooKeeper, and ZooKeeper
    expires its session once its timeout passes.
    """

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = False
        self._closed = False
        threading.Thread(target=self._accept, name="cut-proxy", daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets, self._open = set(self._open), set()
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            # Registered before the upstream connect and checked again after it: a cut made
            # meanwhile closes the client (it was in ``_open``) or is seen here, so no
            # connection accepted around a cut outlives it.
            with self._lock:
                if self._cut:
                    _close(client)
                    continue
                self._open.add(client)
            try:
                server = self._connect_upstream()
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                forward = client in self._open
                if forward:
                    self._open.add(server)
            if not forward:
                _close(client)
                _close(server)
                continue
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _connect_upstream(self) -> socket.socket:
        return socket.create_connection(self.upstream, timeout=5)

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        _close(source)
        _close(target)


def _close(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with suppress(OSError):
        sock.close()
