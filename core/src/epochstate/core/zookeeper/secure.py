"""Securing a tree made before authentication: the project's ACL on every znode under a root.

Components with credentials give the znodes they create the project's ACL
(:func:`epochstate.core.zookeeper.client.new_client`), but znodes created before
they had credentials keep ZooKeeper's open ACL. :func:`secure_tree` sets the ACL
on those, top-down, so that an upgrade ends with no open znode. Run it once every
component has the credentials: from then on a component without them is refused.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import ACL

from epochstate.core.zookeeper.errors import AccessDenied
from epochstate.core.zookeeper.session import wait


@dataclass(frozen=True)
class SecuredTree:
    """What :func:`secure_tree` found: ``znodes`` visited, ``changed`` of them got the ACL."""

    root: str
    znodes: int
    changed: int


def secure_tree(
    client: KazooClient, root: str, acl: list[ACL], *, dry_run: bool = False, timeout: float = 10.0
) -> SecuredTree:
    """Give ``root`` and every znode below it the ACL ``acl``; what was done.

    Parents go before their children, so a tree whose parent is already secured
    stays readable to ``client`` (it holds the identity the ACL names). Znodes
    that go away meanwhile (ephemerals, retention) are skipped; znodes created
    meanwhile by a component with credentials have the ACL already. With
    ``dry_run``, nothing is changed and ``changed`` counts what would be. Each
    request waits at most ``timeout`` seconds.

    Raises:
        KazooTimeoutError, ConnectionLoss: ZooKeeper did not answer (run it again).
        AccessDenied: a znode's ACL refuses ``client`` (the tree was secured with
            another identity); the message names the znode.
    """
    wanted = sorted(acl)
    pending, znodes, changed = deque([root]), 0, 0
    while pending:
        path = pending.popleft()
        try:
            acls, _ = wait(client.get_acls_async(path), timeout)
            if sorted(acls) != wanted:
                if not dry_run:
                    wait(client.set_acls_async(path, acl), timeout)
                changed += 1
            znodes += 1
            children = wait(client.get_children_async(path), timeout)
        except NoNodeError:
            continue
        except NoAuthError:
            raise AccessDenied(
                f"{path}: ZooKeeper refused this identity; the tree was secured with other credentials"
            ) from None
        prefix = "" if path == "/" else path
        pending.extend(f"{prefix}/{child}" for child in sorted(children))
    return SecuredTree(root, znodes, changed)
