"""``local://`` targets: reads of a daemon's store on this node, in this process.

``local:///var/lib/epochstate`` names a daemon's data directory. Its reads are
served by the daemon's own code over a read-only follower of its store (a RocksDB
secondary instance), which the ``daemon`` extra installs and registers under the
``epochstate.targets`` entry point group; this module finds it there, so the client
library itself needs none of the daemon's libraries.
"""

from __future__ import annotations

from typing import Any

import grpc

from epochstate.client.errors import InvalidArgument

SCHEME = "local://"
GROUP = "epochstate.targets"


def is_local(target: str) -> bool:
    return target.startswith(SCHEME)


def open_local(target: str) -> grpc.Channel:
    """A channel whose calls are answered in this process from the store of the daemon
    whose data directory ``target`` (``local:///path``) names.

    Raises:
        InvalidArgument: no path, or the daemon extra (its in-process reader) is not installed.
    """
    path = target[len(SCHEME) :]
    if not path.startswith("/"):
        raise InvalidArgument(
            f"a local target names an absolute data directory, local:///path; got {target!r}"
        )
    # Imported here: reading the installed distributions' metadata costs a tenth of a
    # second, which a client of a remote daemon should not pay at import.
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group=GROUP) if e.name == "local"]
    if not found:
        raise InvalidArgument(
            f"{target}: in-process reads need the daemon's store reader (pip install 'epochstate[daemon]')"
        )
    opener: Any = found[0].load()
    channel: grpc.Channel = opener(path)
    return channel
