"""The registry's writer thread and how it follows the ZooKeeper connection.

Connection states (kazoo's ``KazooState``) and what they mean here:

- SUSPENDED: the connection dropped; the session, and with it this node's
  ephemeral znodes, may still be alive. Nothing is written until CONNECTED.
- LOST: the session expired; ZooKeeper has deleted this node's ephemerals.
  kazoo opens a new session by itself, and the next sync re-creates them.
- CONNECTED: (re)connected; the thread syncs at once.

kazoo calls listeners on its connection thread, which must never block, so the
listener only sets an event; all ZooKeeper work happens on this thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.protocol.states import KazooState

from epochstate.core.zookeeper.errors import RegistryError
from epochstate.core.zookeeper.session import CONNECTION_ERRORS

log = logging.getLogger(__name__)

# InterruptedError: a retry inside the sync noticed that the thread is stopping.
_UNAVAILABLE: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, InterruptedError)
NOT_AUTHORIZED = (
    "registry sync waits: ZooKeeper refused a write, the znode's ACL does not grant it to this "
    "daemon's identity; set zookeeper_auth_file to the credentials the tree was secured with"
)


class SyncThread:
    """Runs ``sync`` on its own thread until stopped.

    ``sync`` runs when :meth:`wake` is called, when the client (re)connects, and
    every ``idle_interval`` seconds while connected (a no-op when nothing changed,
    and a safety net for a missed wake-up). A failed sync is retried after a
    backoff of up to ``max_backoff`` seconds while connected, or on reconnect.
    ``healthy`` is False from a failed sync until the next successful one.
    """

    def __init__(
        self,
        client: KazooClient,
        sync: Callable[[], None],
        *,
        name: str = "registry-sync",
        idle_interval: float = 1.0,
        min_backoff: float = 0.1,
        max_backoff: float = 2.0,
    ) -> None:
        self.client = client
        self._sync = sync
        self.idle_interval = idle_interval
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.healthy = True
        self.sessions_lost = 0
        self.closing = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._last_error = ""

    def start(self) -> None:
        self.client.add_listener(self._on_state)
        self._thread.start()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the sync in progress, if any; waits up to ``timeout`` seconds."""
        self.closing.set()
        self._wake.set()
        self.client.remove_listener(self._on_state)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self.sessions_lost += 1
        elif state == KazooState.CONNECTED:
            self._wake.set()

    def _run(self) -> None:
        backoff = self.min_backoff
        while not self.closing.is_set():
            self._wake.wait(self.idle_interval)
            self._wake.clear()
            if self.closing.is_set():
                break
            if not self.client.connected:
                continue  # the CONNECTED listener wakes us
            try:
                self._sync()
            except _UNAVAILABLE as error:
                if self.closing.is_set():
                    break
                self._failed(f"ZooKeeper unavailable during sync: {error!r}", logging.INFO)
            except RegistryError as error:
                self._failed(f"registry sync waits: {error}", logging.WARNING)
            except NoAuthError:
                self._failed(NOT_AUTHORIZED, logging.ERROR)
            except Exception as error:
                self._failed(f"registry sync failed: {error!r}", logging.ERROR, error)
            else:
                if not self.healthy:
                    log.info("registry in sync with ZooKeeper again")
                self.healthy = True
                self._last_error = ""
                backoff = self.min_backoff
                continue
            if self.client.connected:
                self.closing.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                self._wake.set()

    def _failed(self, message: str, level: int, error: Exception | None = None) -> None:
        self.healthy = False
        # Log a repeated failure once, not at every retry.
        if message != self._last_error:
            log.log(level, "%s", message, exc_info=error)
            self._last_error = message
