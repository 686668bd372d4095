"""The ZooKeeper registry (kazoo): nodes, jobs, their epochs and replicas.

``layout`` says where things live, ``records`` what the znodes hold, ``view``
reads them, ``znodes`` writes one node's part (its ``ephemerals``, ``job_znodes``
and epochs, through ``transactions``), ``pending``, ``sync`` and ``registry``
keep that part in ZooKeeper across outages and expired sessions.
"""

from epochstate.core.zookeeper.client import new_client
from epochstate.core.zookeeper.errors import (
    EpochConflict,
    InvalidName,
    InvalidRecord,
    JobNotRegistered,
    RegistryError,
    RegistryUnavailable,
)
from epochstate.core.zookeeper.layout import DEFAULT_ROOT, Layout
from epochstate.daemon.registry.registry import Registry
from epochstate.daemon.registry.view import RegistryView

__all__ = [
    "DEFAULT_ROOT",
    "EpochConflict",
    "InvalidName",
    "InvalidRecord",
    "JobNotRegistered",
    "Layout",
    "Registry",
    "RegistryError",
    "RegistryUnavailable",
    "RegistryView",
    "new_client",
]
