"""The alias znodes: define, read, list and delete aliases; load an alias's chain.

Bounded requests, RegistryUnavailable and AccessDenied as in
:class:`~epochstate.core.alignment.requests.SubjectRequests`. The swaps are read
through :class:`~epochstate.core.swap.registry.SwapRegistry`'s public calls.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from epochstate.core.alias.chain import AliasChain, chain_of
from epochstate.core.alias.errors import AliasNotFound, AmbiguousName
from epochstate.core.alias.records import AliasRecord
from epochstate.core.alignment.layout import DEFAULT_ROOT
from epochstate.core.alignment.requests import SubjectRequests, Watch
from epochstate.core.swap.registry import SwapRegistry
from epochstate.core.zookeeper.layout import Layout, check_name
from epochstate.core.zookeeper.subject_records import SubjectSourceRecord


class AliasRegistry(SubjectRequests):
    """The aliases under ``root``; safe to share between threads."""

    def __init__(self, client: KazooClient, root: str = DEFAULT_ROOT, *, timeout: float = 5.0) -> None:
        super().__init__(client, timeout)
        self.layout = Layout(root)
        self.swaps = SwapRegistry(client, root, timeout=timeout)

    def get(self, name: str, watch: Watch | None = None) -> AliasRecord | None:
        """Alias ``name``; None if there is none. ``watch`` as in SwapRegistry.get."""
        path = self.layout.alias(name)
        data = self._call(lambda: self._read(path, watch))
        return None if data is None else AliasRecord.decode(name, data)

    def names(self) -> list[str]:
        """The aliases, sorted."""
        return sorted(self._call(lambda: self._children(self.layout.aliases)))

    def define(self, record: AliasRecord) -> AliasRecord:
        """Write alias ``record.name`` (replacing its definition if there is one).

        Refused with AmbiguousName when a job of that name is registered
        (``<root>/jobs/<name>``): jobs and aliases share one namespace.
        """
        path = self.layout.alias(record.name)
        if self._call(lambda: self._read(self.layout.job(record.name), None)) is not None:
            raise AmbiguousName(
                f"{record.name!r} is a job: an alias cannot take its name", metadata={"job": record.name}
            )
        self._ensure(self.layout.aliases)

        def write() -> None:
            try:
                self._wait(self.client.create_async(path, record.encode()))
            except NodeExistsError:
                self._wait(self.client.set_async(path, record.encode()))

        self._call(write)
        return record

    def delete(self, name: str) -> None:
        """Delete alias ``name``; AliasNotFound if there is none."""
        path = self.layout.alias(check_name("alias", name))

        def remove() -> None:
            try:
                self._wait(self.client.delete_async(path))
            except NoNodeError:
                raise AliasNotFound(f"no alias {name!r}", metadata={"job": name}) from None

        self._call(remove)

    def chain(self, name: str, watch: Watch | None = None) -> AliasChain | None:
        """Alias ``name`` and the jobs answering its epochs; None if there is no such alias.

        ``watch`` is left on the alias and on its subject's newest swap: it is
        called (once each, on kazoo's event thread) when either changes.
        """
        record = self.get(name, watch)
        if record is None:
            return None
        newest = self.swaps.get(record.subject, watch)
        swaps = [] if newest is None else [*self.swaps.past(record.subject), newest]
        return chain_of(record, swaps)

    def aligned_inputs(self, job: str) -> list[str]:
        """The subjects ``job`` reads aligned (its source records), sorted."""
        check_name("job", job)

        def read() -> list[str]:
            found = []
            for topic in sorted(self._children(self.layout.subjects)):
                data = self._read(self.layout.subject_source(topic, job), None)
                if data is not None and SubjectSourceRecord.decode(data).mode == "aligned":
                    found.append(topic)
            return found

        return self._call(read)
