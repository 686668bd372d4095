"""Following the group's job definitions as they change: kazoo's ChildrenWatch and DataWatch."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from epochstate.core.zookeeper.errors import InvalidRecord
from epochstate.core.zookeeper.group_records import JobDefinition

log = logging.getLogger(__name__)


class DefinitionsWatch:
    """Calls ``callback`` with every valid definition under ``path`` (job -> definition),
    once at the start and again after each change: a job added or removed (one
    ChildrenWatch on ``path``), a definition changed (one DataWatch per job).

    kazoo calls back on its event thread, one call at a time, and keeps watching
    across reconnections and expired sessions (re-reading what it watches), so a
    change made while disconnected is seen on reconnection. The callback must not
    block (hand work to a thread of your own). A definition that does not decode
    is logged and left out. ``path`` is created if missing.
    """

    def __init__(
        self, client: KazooClient, path: str, callback: Callable[[dict[str, JobDefinition]], None]
    ) -> None:
        self.client = client
        self.path = path
        self._callback = callback
        self._lock = threading.Lock()
        self._definitions: dict[str, JobDefinition] = {}
        self._watched: set[str] = set()
        self._stopped = False
        self._seen_children = False
        client.ensure_path(path)
        ChildrenWatch(client, path, self._on_children)

    @property
    def definitions(self) -> dict[str, JobDefinition]:
        """The definitions as last seen."""
        with self._lock:
            return dict(self._definitions)

    def stop(self) -> None:
        """Stop calling back (kazoo drops each watch at its next event)."""
        with self._lock:
            self._stopped = True

    def _on_children(self, children: list[str]) -> bool:
        with self._lock:
            if self._stopped:
                return False
            gone = set(self._definitions) - set(children)
            for name in gone:
                del self._definitions[name]
            new = set(children) - self._watched
            self._watched |= new
            first, self._seen_children = not self._seen_children, True
        for name in sorted(new):
            DataWatch(self.client, f"{self.path}/{name}", self._data_watcher(name))
        if gone or (first and not new):
            self._notify()
        return True

    def _data_watcher(self, name: str) -> Callable[[bytes | None, ZnodeStat | None], bool]:
        def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool:
            with self._lock:
                if self._stopped:
                    return False
                if stat is None:  # deleted: a job of that name created later gets a watch of its own
                    self._watched.discard(name)
                    self._definitions.pop(name, None)
                else:
                    try:
                        self._definitions[name] = JobDefinition.decode(data)
                    except InvalidRecord as error:
                        log.error("job %r is left out of the group's definitions: %s", name, error)
                        self._definitions.pop(name, None)
            self._notify()
            return stat is not None

        return on_data

    def _notify(self) -> None:
        with self._lock:
            if self._stopped:
                return
            snapshot = dict(self._definitions)
        try:
            self._callback(snapshot)
        except Exception:
            log.exception("the callback of the group's definitions watch failed")
