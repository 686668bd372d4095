"""This daemon's membership of a group: the ephemeral znode ``<root>/groups/<group>/members/<node>``.

Why not kazoo's Party or ShallowParty recipe: they name each member's znode
after a random uuid (two daemons with one node name would both join, and
finding a node's znode takes a listing), they take a NodeExistsError for their
own znode without checking the session that owns it, and they do not join again
after the session expired. A plain ephemeral named after the node gives one
member per node name, a direct lookup, and this module re-creates it in each new
session (on the registry's sync thread, which follows the connection's states).
"""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError, KazooRetry

from epochstate.core.zookeeper.errors import InvalidRecord, MemberNameTaken
from epochstate.core.zookeeper.group_records import MemberRecord
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.session import CONNECTION_ERRORS, session_id, wait
from epochstate.daemon.registry.sync import SyncThread

log = logging.getLogger(__name__)


def read_members(
    client: KazooClient, layout: Layout, group: str, timeout: float = 5.0
) -> dict[str, MemberRecord]:
    """The live members of ``group`` by node name (members whose record does not decode
    are logged and left out; none when the group does not exist).

    Raises:
        KazooTimeoutError, ConnectionLoss, SessionExpiredError: ZooKeeper did not answer.
    """
    parent = layout.group_members(group)
    try:
        names = wait(client.get_children_async(parent), timeout)
    except NoNodeError:
        return {}
    requests = {name: client.get_async(f"{parent}/{name}") for name in sorted(names)}
    found: dict[str, MemberRecord] = {}
    for name, request in requests.items():
        try:
            found[name] = MemberRecord.decode(wait(request, timeout)[0])
        except NoNodeError:
            continue  # left meanwhile
        except InvalidRecord as error:
            log.error("group %r: member %r is left out: %s", group, name, error)
    return found


class Membership:
    """Keeps node ``node`` a member of group ``group`` while the client's session lives,
    and joins again in every new session, until :meth:`leave`.

    A member znode held by another session (this node's previous process, not
    expired yet) is taken over once ZooKeeper expires that session: the sync
    retries with back-off and logs MemberNameTaken meanwhile.
    """

    def __init__(
        self,
        client: KazooClient,
        layout: Layout,
        group: str,
        node: str,
        record: MemberRecord,
        timeout: float = 5.0,
    ) -> None:
        self.client = client
        self.path = layout.group_member(group, node)
        self.parent = layout.group_members(group)
        self.record = record
        self.timeout = timeout
        self._joined_session: int | None = None
        self._joined = threading.Event()
        self._sync = SyncThread(client, self._ensure, name=f"group-member-{node}")
        self._retry = KazooRetry(
            max_tries=3, delay=0.05, max_delay=0.5, ignore_expire=False, interrupt=self._sync.closing.is_set
        )

    def join(self, timeout: float | None = None) -> bool:
        """Start keeping the membership; True once the member znode exists (within ``timeout``)."""
        self._sync.start()
        return self._joined.wait(timeout)

    @property
    def joined(self) -> bool:
        """Whether the member znode exists in the client's current session (as last made sure)."""
        return self._joined.is_set() and self._joined_session == session_id(self.client)

    def leave(self, timeout: float | None = None) -> None:
        """Stop keeping the membership and delete the member znode (if the session still holds it)."""
        self._sync.stop(timeout)
        self._joined.clear()
        if self._joined_session is None or session_id(self.client) != self._joined_session:
            return
        try:
            wait(self.client.delete_async(self.path), self.timeout)
        except NoNodeError:
            pass
        except CONNECTION_ERRORS as error:
            log.info("could not delete member znode %s (it goes with the session): %r", self.path, error)
        self._joined_session = None

    def _ensure(self) -> None:
        current = session_id(self.client)
        if current is not None and current == self._joined_session:
            return
        self._joined.clear()
        self._retry.copy()(self._create, current)
        self._joined_session = current
        self._joined.set()
        log.info("joined group as %s (session 0x%x)", self.path, current or 0)

    def _create(self, session: int | None) -> None:
        wait(self.client.ensure_path_async(self.parent), self.timeout)
        try:
            wait(self.client.create_async(self.path, self.record.encode(), ephemeral=True), self.timeout)
        except NodeExistsError:
            try:
                _, stat = wait(self.client.get_async(self.path), self.timeout)
            except NoNodeError:
                raise ForceRetryError() from None
            if stat.ephemeralOwner != session:
                raise MemberNameTaken(
                    f"{self.path} is held by session 0x{stat.ephemeralOwner:x}, "
                    f"not this one (0x{session or 0:x})"
                ) from None
