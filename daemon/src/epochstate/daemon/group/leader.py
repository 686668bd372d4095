"""The group's leader: the member elected with kazoo's Election recipe runs the assignor.

Every member runs a GroupLeader; one at a time holds the election (the lowest
sequential znode under ``<root>/groups/<group>/election``). While it leads it
watches the members and the job definitions; after a change (and a quiet
``debounce``) it reads members, definitions and the assignment afresh, runs the
assignor, and writes the result when it differs (or names another leader),
generation + 1, through :func:`~epochstate.daemon.group.assignments.write_assignment`,
fenced by its own election znode.

Losing the session ends the term at once (the listener wakes the leading
thread); a deposed leader that has not noticed yet cannot write either, since
its election znode is gone with its session. A new Election (with a new
election znode) is made for every term, because kazoo's lock keeps state that a
failed release leaves behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.election import Election
from kazoo.recipe.watchers import ChildrenWatch

from epochstate.core.zookeeper.errors import AssignmentChanged, InvalidRecord, NotLeader, RegistryError
from epochstate.core.zookeeper.group_records import Assignment
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.session import CONNECTION_ERRORS, join_while_connected, wait
from epochstate.daemon.group.assignments import read_assignment, write_assignment
from epochstate.daemon.group.assignor import assign
from epochstate.daemon.group.definitions import JobDefinitions, now_ms
from epochstate.daemon.group.watch import DefinitionsWatch

log = logging.getLogger(__name__)

# Failures after which the leader reads everything again and assigns anew.
_ASSIGN_AGAIN: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, AssignmentChanged)


class GroupLeader:
    """Contends for the leadership of ``group`` as ``node``, and assigns while it leads.

    ``terms`` counts the terms this member led; ``written`` is the last assignment
    it wrote; ``leadership`` the path of its election znode in its current or last
    term. Start with :meth:`start`, stop with :meth:`stop` (which also gives up the
    leadership). Runs on its own thread; kazoo's callbacks only set events.
    """

    def __init__(
        self,
        client: KazooClient,
        layout: Layout,
        group: str,
        node: str,
        *,
        debounce: float = 0.2,
        max_delay: float = 2.0,
        resync_interval: float = 30.0,
        timeout: float = 5.0,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.client = client
        self.layout = layout
        self.group = group
        self.node = node
        self.debounce = debounce
        self.max_delay = max_delay
        self.resync_interval = resync_interval
        self.timeout = timeout
        self._clock = clock
        self._definitions = JobDefinitions(client, layout, group, timeout=timeout)
        self._changed = threading.Event()
        self._term_over = threading.Event()
        self._closing = threading.Event()
        self._election: Election | None = None
        self._watch: DefinitionsWatch | None = None
        self._leading = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"group-leader-{node}", daemon=True)
        self.terms = 0
        self.written: Assignment | None = None
        self.leadership: str | None = None

    @property
    def leading(self) -> bool:
        """Whether this member believes it leads (its writes are fenced either way)."""
        return self._leading.is_set()

    def start(self) -> None:
        self.client.add_listener(self._on_state)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop contending and leading; waits up to ``timeout`` seconds for the thread while connected."""
        self._closing.set()
        self._term_over.set()
        self._changed.set()
        self.client.remove_listener(self._on_state)
        if self._watch is not None:
            self._watch.stop()
        election = self._election
        if election is not None:
            election.cancel()
        # Contending retries ZooKeeper until the connection is back: no use waiting while it is away.
        join_while_connected(self._thread, self.client, timeout)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._term_over.set()
            self._changed.set()

    def _on_change(self, *_: object) -> bool:
        self._changed.set()
        return not self._closing.is_set()

    def _run(self) -> None:
        watching = False
        while not self._closing.is_set():
            if not self.client.connected:
                self._closing.wait(0.1)
                continue
            try:
                if not watching:
                    # Watches outlive terms (and sessions): they only wake the leading thread.
                    self.client.ensure_path(self.layout.group_members(self.group))
                    ChildrenWatch(self.client, self.layout.group_members(self.group), self._on_change)
                    self._watch = self._definitions.watch(lambda _: self._changed.set())
                    watching = True
                self._abandon()
                self._election = Election(self.client, self.layout.group_election(self.group), self.node)
                if self._closing.is_set():
                    break
                self._election.run(self._lead)
            except (*CONNECTION_ERRORS, NoAuthError, RegistryError) as error:
                log.info("group %r: contending again after %r", self.group, error)
                self._closing.wait(0.5)
            except Exception:
                log.exception("group %r: the leader's thread failed; contending again", self.group)
                self._closing.wait(0.5)

    def _abandon(self) -> None:
        """Delete the last term's election znode if its release failed (the connection was
        down): while this session lives it would stay first in line, and nobody would lead."""
        previous = self._election
        if previous is None or previous.lock.node is None:
            return
        path = f"{self.layout.group_election(self.group)}/{previous.lock.node}"
        with suppress(NoNodeError):
            wait(self.client.delete_async(path), self.timeout)
        previous.lock.node = None

    def _lead(self) -> None:
        election = self._election
        assert election is not None and election.lock.node is not None
        leadership = f"{self.layout.group_election(self.group)}/{election.lock.node}"
        self._term_over.clear()
        # Checked after clearing: a stop or a session lost meanwhile is not missed.
        if self._closing.is_set() or not self.client.exists(leadership):
            return
        self.terms += 1
        self.leadership = leadership
        self._leading.set()
        log.info("group %r: %s leads (term %d)", self.group, self.node, self.terms)
        self._changed.set()
        failure = ""
        try:
            while not self._term_over.is_set():
                self._changed.wait(self.resync_interval)
                if not self._quiet():
                    break
                try:
                    self._assign(leadership)
                except NotLeader as error:
                    log.warning("group %r: %s", self.group, error)
                    break
                except _ASSIGN_AGAIN as error:
                    if repr(error) != failure:  # once, not at every retry of an outage
                        log.info("group %r: assigning again after %r", self.group, error)
                    failure = repr(error)
                    self._changed.set()
                    self._term_over.wait(0.2 if self.client.connected else 1.0)
                else:
                    failure = ""
        finally:
            self._leading.clear()
            log.info("group %r: %s stops leading", self.group, self.node)

    def _quiet(self) -> bool:
        """Wait until no change came for ``debounce`` seconds (``max_delay`` at most); False
        when the term ended meanwhile."""
        deadline = time.monotonic() + self.max_delay
        while self._changed.is_set() and time.monotonic() < deadline:
            self._changed.clear()
            if self._term_over.wait(self.debounce):
                return False
        self._changed.clear()
        return not self._term_over.is_set()

    def _assign(self, leadership: str) -> None:
        try:
            names = wait(self.client.get_children_async(self.layout.group_members(self.group)), self.timeout)
        except NoNodeError:
            names = []
        definitions = self._definitions.list()
        try:
            previous, version = read_assignment(self.client, self.layout, self.group, self.timeout)
        except InvalidRecord as error:
            log.error("group %r: replacing an assignment that does not decode: %s", self.group, error)
            _, stat = wait(self.client.get_async(self.layout.group_assignment(self.group)), self.timeout)
            previous, version = None, stat.version
        jobs = assign(previous.jobs if previous else {}, names, definitions)
        if previous is not None and previous.leader == self.node and previous.jobs == jobs:
            return
        generation = (previous.generation if previous else 0) + 1
        assignment = Assignment(generation, self.node, self._clock(), jobs)
        write_assignment(self.client, self.layout, self.group, leadership, assignment, version, self.timeout)
        self.written = assignment
        shortfall = {job: a.shortfall for job, a in jobs.items() if a.shortfall}
        log.info(
            "group %r: assignment generation %d for %d member(s), %d job(s)%s",
            self.group,
            generation,
            len(names),
            len(jobs),
            f"; replicas missing: {shortfall}" if shortfall else "",
        )
