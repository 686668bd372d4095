"""The ZooKeeper requests of the subject registry: each bounded, and a call's all together.

Each request waits at most ``timeout`` seconds for its answer; a request that
failed on a lost connection is repeated (``KazooRetry``) a few times. Raised:
:class:`RegistryUnavailable` when ZooKeeper still does not answer,
:class:`AccessDenied` when a znode's ACL refuses the client's identity.

:meth:`SubjectRequests.within` bounds a caller's whole call (every request, every
repeat and the pauses between them) by the caller's own deadline, such as what
remains of a gRPC call: a ZooKeeper that stops answering in the middle of a
request then fails the call with RegistryUnavailable before its deadline, not
after ``timeout`` per request and repeat. A request that timed out may still
run later, which is why every write of the registry is idempotent.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry

from epochstate.core.alignment.errors import RegistryUnavailable
from epochstate.core.zookeeper.errors import AccessDenied
from epochstate.core.zookeeper.session import CONNECTION_ERRORS, wait

T = TypeVar("T")
S = TypeVar("S", bound="SubjectRequests")
Watch = Callable[[WatchedEvent], None]

ACCESS_DENIED = (
    "ZooKeeper refused a request on the subject registry: the znode's ACL does not grant it to "
    "this identity; give the component the ZooKeeper credentials the tree was secured with "
    "(zookeeperAuthFile, --zookeeper-auth-file or EPOCHSTATE_ZOOKEEPER_AUTH_FILE)"
)


class SubjectRequests:
    """Requests of ``client``, each waiting at most ``timeout`` seconds; safe to share between threads."""

    def __init__(self, client: KazooClient, timeout: float) -> None:
        self.client = client
        self.timeout = timeout
        self._retry = KazooRetry(max_tries=4, delay=0.1, backoff=2, max_delay=1.0)
        self._ends_at: float | None = None  # time.monotonic() by which every call must end
        self._ensured: set[str] = set()
        self._lock = threading.Lock()

    def within(self: S, seconds: float | None) -> S:
        """A view of this registry whose every call ends within ``seconds`` from now
        (None: this registry, each request bounded only by ``timeout``).

        The view shares this registry's client and what it knows of the tree; it is
        meant for the calls of one caller (a gRPC call), then dropped.
        """
        if seconds is None:
            return self
        bounded = copy.copy(self)
        bounded._ends_at = time.monotonic() + max(0.0, seconds)
        return bounded

    def remaining(self) -> float | None:
        """Seconds left until the deadline of :meth:`within` (None: no deadline)."""
        return None if self._ends_at is None else max(0.0, self._ends_at - time.monotonic())

    def _wait(self, result: Any) -> Any:
        """The value of kazoo's asynchronous ``result``, within ``timeout`` and the deadline.

        Raises KazooTimeoutError when either passes first.
        """
        timeout, remaining = self.timeout, self.remaining()
        if remaining is not None:
            timeout = min(timeout, remaining)
            if timeout <= 0:
                raise KazooTimeoutError("the caller's deadline passed before ZooKeeper answered")
        return wait(result, timeout)

    def _call(self, operation: Callable[[], T]) -> T:
        """Run ``operation`` (of :meth:`_wait` requests), repeated after a lost connection."""
        retry = self._retry.copy()
        retry.deadline = self.remaining()  # None: no deadline; else no pause past it
        try:
            result: T = retry(operation)
        except CONNECTION_ERRORS as error:
            within = "" if self._ends_at is None else " within the call's deadline"
            raise RegistryUnavailable(f"ZooKeeper did not answer{within}: {error!r}") from error
        except NoAuthError:
            raise AccessDenied(ACCESS_DENIED) from None
        return result

    def _ensure(self, path: str) -> None:
        """Create ``path`` and its parents, once per registry (views included)."""
        with self._lock:
            if path in self._ensured:
                return
        self._call(lambda: self._wait(self.client.ensure_path_async(path)))
        with self._lock:
            self._ensured.add(path)

    def _read(self, path: str, watch: Watch | None) -> bytes | None:
        """The data of ``path`` (None if it does not exist), setting ``watch`` on it."""
        if self._wait(self.client.exists_async(path, watch=watch)) is None:
            return None
        try:
            data: bytes = self._wait(self.client.get_async(path))[0]
        except NoNodeError:
            return None
        return data

    def _children(self, path: str) -> list[str]:
        """The child names of ``path`` (none if it does not exist)."""
        try:
            names: list[str] = self._wait(self.client.get_children_async(path))
        except NoNodeError:
            return []
        return names
