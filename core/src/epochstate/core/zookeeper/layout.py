"""Where everything lives in ZooKeeper (docs/zookeeper.md).

::

    <root>/nodes/<node>                    ephemeral: a daemon's gRPC address and version
    <root>/jobs/<job>                      checkpoint location, query id, operators
    <root>/jobs/<job>/epochs/<epoch>       written once: one committed epoch
    <root>/jobs/<job>/replicas/<node>      ephemeral: a node's newest and oldest epoch
    <root>/subjects/<topic>/epochs/<k>     written once: subject epoch k's offset ranges
    <root>/subjects/<topic>/sources/<job>  a job reading the subject: mode, its epochs -> subject epochs
    <root>/subjects/<topic>/swap           the newest hot-swap of the subject's writer (core.swap)
    <root>/subjects/<topic>/swaps/<id>     written once: a finished swap the next plan replaced
    <root>/aliases/<name>                  a logical job name that follows an output subject's swaps
    <root>/groups/<group>/jobs/<job>       a job definition of the group: checkpoint, replicas, state
    <root>/groups/<group>/members/<node>   ephemeral: a member of the group (address, version)
    <root>/groups/<group>/election         kazoo's Election recipe: the member that assigns
    <root>/groups/<group>/assignment       written by the leader only: each job's shards and replicas

What the subject znodes hold: :mod:`epochstate.core.zookeeper.subject_records`;
the group znodes: :mod:`epochstate.core.zookeeper.group_records`.

Epoch znode names are the epoch zero-padded to 19 digits (every non-negative
64-bit value fits), so ZooKeeper's lexical order is numeric order.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochstate.core.zookeeper.errors import InvalidName

DEFAULT_ROOT = "/epochstate"
EPOCH_DIGITS = 19
MAX_EPOCH = 10**EPOCH_DIGITS - 1


def check_epoch(epoch: int) -> int:
    """``epoch`` if it is an integer in ``[0, MAX_EPOCH]``, else InvalidName."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
        raise InvalidName(f"epoch must be an integer in [0, {MAX_EPOCH}], got {epoch!r}")
    return epoch


def epoch_name(epoch: int) -> str:
    """The znode name of ``epoch``: ``0000000000000000042`` for 42."""
    return f"{check_epoch(epoch):0{EPOCH_DIGITS}d}"


def parse_epoch_name(name: str) -> int | None:
    """The epoch an epoch znode name stands for; None for a name that is not one."""
    if len(name) != EPOCH_DIGITS or not name.isascii() or not name.isdigit():
        return None
    return int(name)


def check_name(kind: str, name: str) -> str:
    """``name`` if it can be a single znode name (a job or node name), else InvalidName."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name:
        raise InvalidName(f"{kind} name must be a non-empty string without '/': {name!r}")
    if any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in name):
        raise InvalidName(f"{kind} name must not contain control characters: {name!r}")
    return name


@dataclass(frozen=True)
class Layout:
    """The paths under one root; the root is absolute and has no trailing slash."""

    root: str = DEFAULT_ROOT

    def __post_init__(self) -> None:
        root = self.root
        if not root.startswith("/") or (root != "/" and root.endswith("/")) or "//" in root:
            raise InvalidName(f"root must be an absolute path without trailing '/': {root!r}")

    @property
    def _prefix(self) -> str:
        return "" if self.root == "/" else self.root

    @property
    def nodes(self) -> str:
        return f"{self._prefix}/nodes"

    def node(self, node: str) -> str:
        return f"{self.nodes}/{check_name('node', node)}"

    @property
    def jobs(self) -> str:
        return f"{self._prefix}/jobs"

    def job(self, job: str) -> str:
        return f"{self.jobs}/{check_name('job', job)}"

    def epochs(self, job: str) -> str:
        return f"{self.job(job)}/epochs"

    def epoch(self, job: str, epoch: int) -> str:
        return f"{self.epochs(job)}/{epoch_name(epoch)}"

    def replicas(self, job: str) -> str:
        return f"{self.job(job)}/replicas"

    def replica(self, job: str, node: str) -> str:
        return f"{self.replicas(job)}/{check_name('node', node)}"

    @property
    def subjects(self) -> str:
        return f"{self._prefix}/subjects"

    def subject(self, topic: str) -> str:
        return f"{self.subjects}/{check_name('topic', topic)}"

    def subject_epochs(self, topic: str) -> str:
        return f"{self.subject(topic)}/epochs"

    def subject_epoch(self, topic: str, epoch: int) -> str:
        return f"{self.subject_epochs(topic)}/{epoch_name(epoch)}"

    def subject_sources(self, topic: str) -> str:
        return f"{self.subject(topic)}/sources"

    def subject_source(self, topic: str, job: str) -> str:
        return f"{self.subject_sources(topic)}/{check_name('job', job)}"

    def subject_swap(self, topic: str) -> str:
        return f"{self.subject(topic)}/swap"

    def subject_swaps(self, topic: str) -> str:
        return f"{self.subject(topic)}/swaps"

    def subject_past_swap(self, topic: str, swap: int) -> str:
        return f"{self.subject_swaps(topic)}/{epoch_name(swap)}"

    @property
    def aliases(self) -> str:
        return f"{self._prefix}/aliases"

    def alias(self, name: str) -> str:
        return f"{self.aliases}/{check_name('alias', name)}"

    @property
    def groups(self) -> str:
        return f"{self._prefix}/groups"

    def group(self, group: str) -> str:
        return f"{self.groups}/{check_name('group', group)}"

    def group_jobs(self, group: str) -> str:
        return f"{self.group(group)}/jobs"

    def group_job(self, group: str, job: str) -> str:
        return f"{self.group_jobs(group)}/{check_name('job', job)}"

    def group_members(self, group: str) -> str:
        return f"{self.group(group)}/members"

    def group_member(self, group: str, node: str) -> str:
        return f"{self.group_members(group)}/{check_name('node', node)}"

    def group_statuses(self, group: str) -> str:
        return f"{self.group(group)}/status"

    def group_status(self, group: str, node: str) -> str:
        return f"{self.group_statuses(group)}/{check_name('node', node)}"

    def group_election(self, group: str) -> str:
        return f"{self.group(group)}/election"

    def group_assignment(self, group: str) -> str:
        return f"{self.group(group)}/assignment"
