"""``epochstate secure-zookeeper``: the project's ACL on every znode of a tree made before authentication."""

from __future__ import annotations

from typing import Annotated

import typer

from epochstate.cli.align_control import AlignFailure
from epochstate.cli.console import fail
from epochstate.cli.output import print_document, print_line
from epochstate.cli.zookeeper_options import AuthFileOpt, RootOpt, ZooKeeperOpt
from epochstate.cli.zookeeper_session import connect


def secure_zookeeper(
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    zookeeper_auth_file: AuthFileOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="only count the znodes that are not secured")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", help="seconds to wait for each ZooKeeper request")
    ] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document instead of text")] = False,
) -> None:
    """Give every znode under --root the ACL of the identity in --zookeeper-auth-file (an upgrade).

    Run it once every component (daemons, Spark jobs) has the credentials: from then
    on ZooKeeper refuses a component without them. With --json: {"root", "znodes",
    "changed", "dry_run"}. Exit codes: 2 no or unusable credentials, 6 ZooKeeper
    unavailable, 1 a znode refuses the identity (secured with other credentials).
    """
    try:
        from kazoo.exceptions import KazooException
        from kazoo.handlers.threading import KazooTimeoutError

        from epochstate.core.zookeeper.auth import load_auth
        from epochstate.core.zookeeper.errors import AccessDenied, RegistryError
        from epochstate.core.zookeeper.layout import Layout
        from epochstate.core.zookeeper.secure import secure_tree
    except ImportError as error:
        raise fail(
            f"secure-zookeeper needs kazoo: pip install 'epochstate[zookeeper]' ({error})", 1
        ) from None
    try:
        auth = load_auth(zookeeper_auth_file)
        Layout(root)
    except RegistryError as error:
        raise fail(str(error), 2) from None
    if auth is None:
        raise fail(
            "secure-zookeeper needs credentials: --zookeeper-auth-file or EPOCHSTATE_ZOOKEEPER_AUTH_FILE", 2
        )
    try:
        client = connect(zookeeper, zookeeper_auth_file, timeout)
    except AlignFailure as failure:
        raise fail(str(failure), failure.code) from None
    try:
        secured = secure_tree(client, root, auth.acl(), dry_run=dry_run, timeout=timeout)
    except AccessDenied as error:
        raise fail(str(error), 1) from None
    except (KazooException, KazooTimeoutError) as error:
        raise fail(f"ZooKeeper {zookeeper} failed: {error!r}", 6) from None
    finally:
        client.stop()
        client.close()
    if as_json:
        print_document(
            {"root": root, "znodes": secured.znodes, "changed": secured.changed, "dry_run": dry_run}
        )
        return
    verb = "would get" if dry_run else "got"
    print_line(f"{secured.changed} of {secured.znodes} znode(s) under {root} {verb} the ACL of {auth.user}")
