"""The group's job definitions in ZooKeeper: ``<root>/groups/<group>/jobs/<job>``.

Kafka Connect keeps connector configs in its config topic; the group keeps job
definitions here. Every change is a compare-and-set on the znode's version:
read, change, write at the version read, and start again when another writer
came first, so no change is ever lost. A caller that decided on what it read
passes ``expected_version`` and gets DefinitionChanged instead of a retry.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError, KazooRetry

from epochstate.core.zookeeper.errors import DefinitionChanged, InvalidRecord, JobDefined, JobNotDefined
from epochstate.core.zookeeper.group_records import JobDefinition
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.session import wait
from epochstate.daemon.group.watch import DefinitionsWatch

log = logging.getLogger(__name__)

Versioned = tuple[JobDefinition, int]  # a definition and its znode's version


def now_ms() -> int:
    return int(time.time() * 1000)


class JobDefinitions:
    """Add, change, remove, read and list the job definitions of group ``group``.

    Each request waits at most ``timeout`` seconds; conflicting writers are
    retried (with back-off) up to ``max_conflicts`` times.

    Raises (every method):
        KazooTimeoutError, ConnectionLoss, SessionExpiredError: ZooKeeper did not
            answer (the change may or may not have been made: read it again).
        RetryFailedError: other writers came first ``max_conflicts`` times in a row.
        NoAuthError: the znodes' ACL refuses this client's identity.
        InvalidName: a job or group name that cannot be a znode name.
    """

    def __init__(
        self,
        client: KazooClient,
        layout: Layout,
        group: str,
        *,
        timeout: float = 5.0,
        max_conflicts: int = 20,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.client = client
        self.layout = layout
        self.group = group
        self.path = layout.group_jobs(group)
        self.timeout = timeout
        self._clock = clock
        self._retry = KazooRetry(max_tries=max_conflicts, delay=0.01, max_delay=0.5, ignore_expire=False)

    def add(
        self, job: str, checkpoint: str, *, replicas: int = 1, shards: int = 1, partitions: int | None = None
    ) -> Versioned:
        """Define ``job``: running, restart generation 0. Its definition and version.

        Raises:
            JobDefined: the group has a job of that name already.
            InvalidDefinition: replicas < 1, shards that do not split the partitions.
        """
        path = self.layout.group_job(self.group, job)
        now = self._clock()
        definition = JobDefinition(
            checkpoint, replicas, shards=shards, partitions=partitions, created_at_ms=now, updated_at_ms=now
        )
        self._call(self.client.ensure_path_async(self.path))
        try:
            self._call(self.client.create_async(path, definition.encode()))
        except NodeExistsError:
            raise JobDefined(f"group {self.group!r} has a job {job!r} already") from None
        return definition, 0

    def watch(self, callback: Callable[[dict[str, JobDefinition]], None]) -> DefinitionsWatch:
        """Call ``callback`` with every definition now and after every change (see DefinitionsWatch)."""
        return DefinitionsWatch(self.client, self.path, callback)

    def get(self, job: str) -> Versioned:
        """The definition of ``job`` and its znode's version.

        Raises:
            JobNotDefined: no job of that name.
            InvalidRecord: the znode does not hold a definition.
        """
        try:
            data, stat = self._call(self.client.get_async(self.layout.group_job(self.group, job)))
        except NoNodeError:
            raise JobNotDefined(f"group {self.group!r} has no job {job!r}") from None
        return JobDefinition.decode(data), stat.version

    def list(self) -> dict[str, JobDefinition]:
        """Every job of the group that holds a valid definition (others are logged), by name."""
        try:
            names = self._call(self.client.get_children_async(self.path))
        except NoNodeError:
            return {}
        requests = {name: self.client.get_async(f"{self.path}/{name}") for name in sorted(names)}
        found: dict[str, JobDefinition] = {}
        for name, request in requests.items():
            try:
                found[name] = JobDefinition.decode(self._call(request)[0])
            except NoNodeError:
                continue  # removed meanwhile
            except InvalidRecord as error:
                log.error("group %r: job %r is left out: %s", self.group, name, error)
        return found

    def remove(self, job: str, *, expected_version: int | None = None) -> None:
        """Delete the definition of ``job``: its replicas stop following it.

        Raises:
            JobNotDefined: no job of that name.
            DefinitionChanged: the version is not ``expected_version``.
        """
        path = self.layout.group_job(self.group, job)

        def attempt() -> None:
            version = self.get(job)[1] if expected_version is None else expected_version
            try:
                self._call(self.client.delete_async(path, version))
            except NoNodeError:
                raise JobNotDefined(f"group {self.group!r} has no job {job!r}") from None
            except BadVersionError:
                self._conflict(job, expected_version)

        self._retry.copy()(attempt)

    def pause(self, job: str, *, expected_version: int | None = None) -> Versioned:
        """Set ``job`` paused: its replicas stay assigned and serve what they hold, ingesting nothing."""
        return self.update(job, expected_version=expected_version, state="paused")

    def resume(self, job: str, *, expected_version: int | None = None) -> Versioned:
        """Set ``job`` running again."""
        return self.update(job, expected_version=expected_version, state="running")

    def restart(self, job: str, *, expected_version: int | None = None) -> Versioned:
        """Bump ``job``'s restart generation: each replica re-opens the job."""
        return self.update(job, expected_version=expected_version, restart=True)

    def update(
        self, job: str, *, expected_version: int | None = None, restart: bool = False, **changes: Any
    ) -> Versioned:
        """Change fields of ``job``'s definition (``replicas``, ``state``, ``checkpoint``,
        ``shards``, ``partitions``), bump its restart generation with ``restart``; the new
        definition and version. Unchanged values write nothing.

        Raises:
            JobNotDefined: no job of that name.
            DefinitionChanged: the version is not ``expected_version``.
            InvalidDefinition: the changed definition is impossible.
            TypeError: a field that is not one of the definition's.
        """
        path = self.layout.group_job(self.group, job)
        if {"created_at_ms", "updated_at_ms", "restart_generation", "other"} & changes.keys():
            raise TypeError(f"these fields are not changed by hand: {sorted(changes)}")

        def attempt() -> Versioned:
            current, version = self.get(job)
            if expected_version is not None and version != expected_version:
                self._conflict(job, expected_version)
            changed = dataclasses.replace(current, **changes)
            if restart:
                changed = dataclasses.replace(changed, restart_generation=current.restart_generation + 1)
            if changed == current:
                return current, version
            changed = dataclasses.replace(changed, updated_at_ms=max(self._clock(), current.updated_at_ms))
            try:
                stat = self._call(self.client.set_async(path, changed.encode(), version))
            except NoNodeError:
                raise JobNotDefined(f"group {self.group!r} has no job {job!r}") from None
            except BadVersionError:
                self._conflict(job, expected_version)
            return changed, stat.version

        result: Versioned = self._retry.copy()(attempt)
        return result

    def _conflict(self, job: str, expected_version: int | None) -> None:
        if expected_version is not None:
            raise DefinitionChanged(
                f"job {job!r} of group {self.group!r} changed since version {expected_version}"
            )
        raise ForceRetryError()

    def _call(self, result: Any) -> Any:
        return wait(result, self.timeout)
