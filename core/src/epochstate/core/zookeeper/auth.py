"""Who epochstate is in ZooKeeper, and the ACL every znode it creates gets.

Every component (daemon, aligned sink and source, coordinator, CLI) authenticates
with the same digest identity, read from a file: one line ``user:password``, the
form of ZooKeeper's ``addauth digest``. The file is named by the component's own
option (daemon setting ``zookeeper_auth_file``, CLI ``--zookeeper-auth-file``,
data source option ``zookeeperAuthFile``) or, failing that, by the environment
variable ``EPOCHSTATE_ZOOKEEPER_AUTH_FILE``. The password itself is never an
option or a variable, so it shows neither in a process list nor in a Spark plan.

The ACL (:meth:`ZooKeeperAuth.acl`) gives that identity every right and nobody
else any: not even READ for ``world:anyone``. Why, and what stays visible
(``exists`` and ``getAcl`` need no rights in ZooKeeper): docs/zookeeper.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_digest_acl, make_digest_acl_credential

from epochstate.core.zookeeper.errors import AuthConfigError

AUTH_FILE_VARIABLE = "EPOCHSTATE_ZOOKEEPER_AUTH_FILE"
DIGEST = "digest"


@dataclass(frozen=True)
class ZooKeeperAuth:
    """A digest identity; ``password`` never appears in ``repr`` (nor anywhere we log)."""

    user: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.user or ":" in self.user or any(c.isspace() for c in self.user):
            raise AuthConfigError("the ZooKeeper user must be non-empty, without ':' or white space")
        if not self.password:
            raise AuthConfigError("the ZooKeeper password must not be empty")

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data``: sent on every (re)connection of the session."""
        return [(DIGEST, f"{self.user}:{self.password}")]

    @property
    def digest_id(self) -> str:
        """``user:base64(sha1(user:password))``, the id ZooKeeper's ACLs name (not a secret
        in ZooKeeper's model: anyone may read ACLs, hence long random passwords)."""
        return str(make_digest_acl_credential(self.user, self.password))

    def acl(self) -> list[ACL]:
        """Every right to this identity; none to anyone else."""
        return [make_digest_acl(self.user, self.password, all=True)]


def acl_for(auth: ZooKeeperAuth | None) -> list[ACL]:
    """The ACL of every znode a component with ``auth`` creates.

    Without credentials it is ZooKeeper's open ACL (what every znode had before
    authentication existed): anyone may do anything.
    """
    return OPEN_ACL_UNSAFE if auth is None else auth.acl()


def load_auth(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> ZooKeeperAuth | None:
    """The identity in the file ``path``, else in the file ``$EPOCHSTATE_ZOOKEEPER_AUTH_FILE``.

    None when neither is given (an empty value counts as not given): the component
    then works without authentication.

    Raises:
        AuthConfigError: the file cannot be read or is not one ``user:password``
            line. The message names the file, never what it holds.
    """
    environ = os.environ if environ is None else environ
    chosen = str(path) if path else environ.get(AUTH_FILE_VARIABLE, "")
    if not chosen:
        return None
    try:
        text = Path(chosen).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8"
        raise AuthConfigError(f"cannot read the ZooKeeper credentials file {chosen}: {reason}") from None
    lines = [line for line in text.splitlines() if line.strip()]
    user, sep, password = (lines[0] if len(lines) == 1 else "").partition(":")
    if not sep:
        raise AuthConfigError(f"the ZooKeeper credentials file {chosen} must hold one line user:password")
    try:
        return ZooKeeperAuth(user.strip(), password.strip())
    except AuthConfigError as error:
        raise AuthConfigError(f"{chosen}: {error}") from None
