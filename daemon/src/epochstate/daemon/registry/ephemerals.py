"""This node's ephemeral znodes (its node and replica znodes): which ones its session owns.

An ephemeral znode belongs to the session that created it. After a lost
connection, a timeout whose request ran anyway, or a restart, a path may exist
already: it is taken over only when the current session owns it
(:meth:`Ephemerals.claim`), else :class:`StaleEphemeral` is raised.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from kazoo.client import TransactionRequest
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from epochstate.core.zookeeper.errors import RegistryError
from epochstate.daemon.registry.transactions import Requests


class StaleEphemeral(RegistryError):
    """One of this node's ephemeral znodes is held by another session.

    Usually the session of this node's previous process (or a session the client
    gave up on) that ZooKeeper has not expired yet; it goes away within that
    session's timeout. Otherwise two daemons run with the same node name.
    """


@dataclass(frozen=True)
class EphemeralWrite:
    """An ephemeral's create-or-set added to a transaction, as operation ``index``."""

    path: str
    data: bytes
    index: int


class Ephemerals:
    """The ephemeral znodes the current session owns, with the data last written.

    Methods raise ``ForceRetryError`` when a retry is expected to succeed (callers
    wrap them in a ``KazooRetry``). Used by one thread at a time.
    """

    def __init__(self, requests: Requests) -> None:
        self._requests = requests
        self.session: int | None = None
        self._owned: dict[str, bytes | None] = {}  # path -> data (None: taken over, data unknown)

    def begin_session(self, session: int | None) -> None:
        """Forget what the previous session owned."""
        self.session = session
        self._owned.clear()

    def owns(self, path: str) -> bool:
        return path in self._owned

    def put(self, path: str, data: bytes) -> None:
        """Create this session's ephemeral ``path`` or set its data."""
        client = self._requests.client
        if path in self._owned:
            if self._owned[path] == data:
                return
            try:
                self._requests.call(client.set_async(path, data))
                self._owned[path] = data
                return
            except NoNodeError:
                del self._owned[path]
        try:
            self._requests.call(client.create_async(path, data, ephemeral=True))
        except NodeExistsError:
            self.claim(path)
            try:
                self._requests.call(client.set_async(path, data))
            except NoNodeError:
                raise ForceRetryError() from None
        self._owned[path] = data

    def add_to(self, transaction: TransactionRequest, path: str, data: bytes) -> EphemeralWrite:
        """Add the creation of ``path`` (or the setting of its data, if owned) to ``transaction``."""
        index = len(transaction.operations)
        if path in self._owned:
            transaction.set_data(path, data)
        else:
            transaction.create(path, data, ephemeral=True)
        return EphemeralWrite(path, data, index)

    def written(self, write: EphemeralWrite) -> None:
        """Note that the transaction holding ``write`` was committed."""
        self._owned[write.path] = write.data

    def failed(self, write: EphemeralWrite, results: list[Any]) -> None:
        """Raise ForceRetryError (or StaleEphemeral) if ``write`` is what failed in ``results``."""
        result = results[write.index]
        if isinstance(result, NoNodeError):
            self._owned.pop(write.path, None)
            raise ForceRetryError()
        if isinstance(result, NodeExistsError):
            self.claim(write.path)
            raise ForceRetryError()

    def forget(self, path: str) -> None:
        """Note that ``path`` is gone (deleted by this node)."""
        self._owned.pop(path, None)

    def delete(self, path: str) -> None:
        """Delete ``path`` if this session owns it (or held it unseen since a reconnect)."""
        client = self._requests.client
        try:
            _, stat = self._requests.call(client.get_async(path))
        except NoNodeError:
            self._owned.pop(path, None)
            return
        if stat.ephemeralOwner == self.session:
            with suppress(NoNodeError):
                self._requests.call(client.delete_async(path))
        self._owned.pop(path, None)

    def delete_all(self) -> None:
        """Delete the ephemerals this session owns (leaving the registry cleanly)."""
        client = self._requests.client
        pending = [client.delete_async(path) for path in self._owned]
        for request in pending:
            with suppress(NoNodeError):
                self._requests.call(request)
        self._owned.clear()

    def claim(self, path: str) -> None:
        """Remember an existing ``path`` as owned if this session owns it.

        Raises:
            StaleEphemeral: another session owns it.
        """
        try:
            _, stat = self._requests.call(self._requests.client.get_async(path))
        except NoNodeError:
            raise ForceRetryError() from None
        if stat.ephemeralOwner != self.session:
            raise StaleEphemeral(
                f"{path} is held by session 0x{stat.ephemeralOwner:x}, "
                f"not this node's session 0x{self.session or 0:x}"
            )
        self._owned[path] = None
