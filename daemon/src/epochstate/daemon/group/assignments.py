"""The group's one assignment znode: read by every member, written by the leader only.

One znode holds the whole assignment, so each member needs one watch and always
sees an atomic view. A write is a transaction of two operations:

- ``check`` that the writer's election znode (``election/<lock node>``, an
  ephemeral of its session, created when it contended) still exists: while it
  does, the writer's session is alive and it holds the leadership; once the
  session expired, ZooKeeper deleted it and no write of that leader can land,
  whatever the writer believes;
- ``set_data`` on the assignment at the version the leader read (compare-and-set),
  or ``create`` it when there is none yet.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from epochstate.core.zookeeper.errors import AssignmentChanged, NotLeader
from epochstate.core.zookeeper.group_records import Assignment
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.session import wait


def read_assignment(
    client: KazooClient, layout: Layout, group: str, timeout: float = 5.0
) -> tuple[Assignment | None, int | None]:
    """The group's assignment and its znode's version; (None, None) when none was written yet.

    Raises:
        InvalidRecord: the znode holds no assignment.
        KazooTimeoutError, ConnectionLoss, SessionExpiredError: ZooKeeper did not answer.
    """
    try:
        data, stat = wait(client.get_async(layout.group_assignment(group)), timeout)
    except NoNodeError:
        return None, None
    return Assignment.decode(data), stat.version


def write_assignment(
    client: KazooClient,
    layout: Layout,
    group: str,
    leadership: str,
    assignment: Assignment,
    version: int | None,
    timeout: float = 5.0,
) -> int:
    """Write ``assignment`` if ``leadership`` (the path of the writer's election znode)
    still exists and the assignment znode is at ``version`` (None: does not exist);
    the znode's new version.

    Raises:
        NotLeader: ``leadership`` is gone: the writer's session expired, someone
            else leads (nothing was written).
        AssignmentChanged: the assignment is not at ``version`` (nothing was written).
        KazooTimeoutError, ConnectionLoss, SessionExpiredError: ZooKeeper did not
            answer (read the assignment again before deciding).
    """
    path = layout.group_assignment(group)
    data = assignment.encode()
    transaction = client.transaction()
    transaction.check(leadership, 0)
    if version is None:
        transaction.create(path, data)
    else:
        transaction.set_data(path, data, version)
    results: list[Any] = wait(transaction.commit_async(), timeout)
    leader_check, write = results
    if isinstance(leader_check, (NoNodeError, BadVersionError)):
        raise NotLeader(f"{leadership} is gone: this member no longer leads group {group!r}")
    if isinstance(write, (BadVersionError, NodeExistsError, NoNodeError)):
        raise AssignmentChanged(f"the assignment of group {group!r} is not at version {version}")
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, (RolledBackError, RuntimeInconsistency)):
            raise result
    return 0 if version is None else version + 1
