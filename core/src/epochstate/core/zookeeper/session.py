"""The ZooKeeper session as the registry sees it: its id, and calls that never hang.

kazoo queues a request made while the connection is down (SUSPENDED) until it
reconnects, and a plain ``client.get()`` waits for it without a limit. Every
registry call therefore waits on the asynchronous result with a timeout; a
timed-out request may still run later, which is why every write is idempotent.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import RetryFailedError

# Failures that mean "ZooKeeper is not reachable right now", not "the request was wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    ConnectionClosedError,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
    RetryFailedError,
)

# How often join_while_connected looks at the connection again.
_POLL = 0.1


def session_id(client: KazooClient) -> int | None:
    """The id of the client's session while connected, else None."""
    client_id = client.client_id
    return int(client_id[0]) if client_id else None


def wait(result: Any, timeout: float) -> Any:
    """The value of a kazoo asynchronous result, waiting at most ``timeout`` seconds.

    Raises the call's own exception, or KazooTimeoutError after ``timeout``.
    """
    return result.get(timeout=timeout)


def join_while_connected(thread: threading.Thread, client: KazooClient, timeout: float | None) -> None:
    """Wait up to ``timeout`` seconds (None: no limit) for ``thread`` to end, but only while
    ``client`` is connected.

    A thread inside a kazoo request or retry loop cannot finish while ZooKeeper is
    unreachable: it ends once the connection is back or the client is closed. Waiting for
    it then only delays a shutdown, by the whole ``timeout``.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while thread.is_alive() and client.connected:
        left = _POLL if deadline is None else min(_POLL, deadline - time.monotonic())
        if left <= 0:
            return
        thread.join(left)
