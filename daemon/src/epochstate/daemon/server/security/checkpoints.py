"""Which checkpoint locations a caller may make the daemon follow: those under configured roots.

Without this, FollowJob (and ReportEpoch with a checkpoint) would make the
daemon read any path it can reach on behalf of whoever calls. A location is
compared with each root as a sequence of path components, after
normalization: a local path (plain or ``file:``) is resolved as the daemon
would open it (symlinks followed, so a link cannot lead out of a root); a
remote URI keeps its scheme (``s3a``/``s3n`` are ``s3``) and authority, and a
``..`` component refuses it outright.

A refusal is CHECKPOINT_NOT_ALLOWED (PERMISSION_DENIED), not INVALID_ARGUMENT:
the location is well-formed and may be fine for another daemon; this daemon's
operator has not allowed it.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import unquote, urlsplit

from epochstate.core.partition_ranges import PartitionRanges
from epochstate.daemon.server.service import IngestControl
from epochstate.daemon.server.status import CheckpointNotAllowed
from epochstate.daemon.store.catalog import JobEntry

_SAME_SCHEME = {"s3a": "s3", "s3n": "s3", "abfss": "abfs", "swebhdfs": "webhdfs"}


def _parts(location: str) -> tuple[str, ...] | None:
    """``(scheme, authority, *components)``; None for a location that must be refused."""
    split = urlsplit(location)
    scheme = split.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and location[1:2] == ":"):
        path = unquote(split.path) if scheme == "file" else location
        if not os.path.isabs(path):
            return None
        resolved = os.path.realpath(path)
        return ("file", "", *[p for p in resolved.split(os.sep) if p])
    components = [p for p in unquote(split.path).split("/") if p and p != "."]
    if ".." in components:
        return None
    normal = posixpath.normpath("/" + "/".join(components))
    return (_SAME_SCHEME.get(scheme, scheme), split.netloc.lower(), *[p for p in normal.split("/") if p])


class CheckpointRoots:
    """The locations under which checkpoints may be followed on a caller's request."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = tuple(roots)
        self._parts = [p for p in (_parts(r) for r in roots) if p is not None]
        if len(self._parts) != len(self.roots):
            raise ValueError(f"auth.checkpoint_roots must be absolute paths or URIs: {list(roots)}")

    def check(self, checkpoint: str) -> None:
        """Raise CheckpointNotAllowed unless ``checkpoint`` lies under one of the roots."""
        parts = _parts(checkpoint)
        if parts is not None and any(parts[: len(root)] == root for root in self._parts):
            return
        if not self.roots:
            why = "this daemon has no auth.checkpoint_roots, so it follows only the jobs of its config"
        else:
            why = f"it is not under {', '.join(self.roots)} (auth.checkpoint_roots)"
        raise CheckpointNotAllowed(f"the daemon will not follow checkpoint {checkpoint}: {why}")


class PartitionedIngest(IngestControl, Protocol):
    """An ingest that can follow some Spark partitions of a job (the daemon's ingest loop)."""

    def follow(self, job: str, checkpoint: str, partitions: PartitionRanges | None = None) -> JobEntry: ...


class FollowGuard:
    """An ingest whose :meth:`follow` first checks the location against ``roots``.

    The servicer follows a job through it (FollowJob, ReportEpoch naming a
    checkpoint); jobs of the daemon's own config bypass it.
    """

    def __init__(self, ingest: PartitionedIngest, roots: CheckpointRoots) -> None:
        self._ingest = ingest
        self._roots = roots

    def follow(self, job: str, checkpoint: str, partitions: PartitionRanges | None = None) -> JobEntry:
        """Follow ``job`` (of its Spark ``partitions``, None: all) once its checkpoint passes the roots."""
        self._roots.check(checkpoint)
        return self._ingest.follow(job, checkpoint, partitions)

    def poke(self, job: str, epoch: int | None = None, run_id: str = "", query_id: str = "") -> None:
        self._ingest.poke(job, epoch, run_id, query_id)
