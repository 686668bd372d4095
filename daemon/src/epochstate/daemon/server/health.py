"""Honest health: ``grpc.health.v1`` says NOT_SERVING while the daemon cannot do its job.

Kubernetes readiness (a gRPC probe) then takes the pod out of its Service until it
recovers. Two causes, each with a precise meaning:

* **zookeeper_lost**: ZooKeeper has been unreachable for longer than the session
  timeout (from the moment the connection was suspended, or from start-up if it
  never connected). By then the session has expired or is about to: the node's
  registration and replicas are gone, and ``aligned_with`` reads cannot resolve.
  A shorter blip (a reconnect within the timeout keeps the session) does not count.
* **ingest_stuck**: some job has an epoch that the daemon saw committed in the
  checkpoint and has not ingested, and the job's newest ingested epoch has not
  moved for ``stuck_after`` seconds; or the ingest loop has not come round for
  ``stuck_after`` seconds (a hung read: while it hangs it cannot even see new
  commits). A job whose ingest is blocked on an epoch recorded as a problem (its
  files are damaged or missing: DescribeJob and ``epochstate_epoch_problems`` show
  it, and every replica of the checkpoint has the same problem) does not count:
  taking this pod out would not help.

Per service: the overall status (service ``""``) is NOT_SERVING for either cause;
``epochstate.v1.EpochState`` likewise; ``epochstate.v1.AlignmentAdmin`` only for
zookeeper_lost. Every status is SERVING again as soon as its causes are gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from grpc_health.v1 import health, health_pb2
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.probes import LIVENESS
from epochstate.daemon.store.catalog import Catalog
from epochstate.v1 import epochstate_pb2 as pb

log = logging.getLogger(__name__)

ZOOKEEPER_LOST = "zookeeper_lost"
INGEST_STUCK = "ingest_stuck"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

_ALL = frozenset({ZOOKEEPER_LOST, INGEST_STUCK})
_ZOOKEEPER = frozenset({ZOOKEEPER_LOST})
SERVICES: Mapping[str, frozenset[str]] = {
    "": _ALL,
    pb.DESCRIPTOR.services_by_name["EpochState"].full_name: _ALL,
    pb.DESCRIPTOR.services_by_name["AlignmentAdmin"].full_name: _ZOOKEEPER,
    pb.DESCRIPTOR.services_by_name["JobsAdmin"].full_name: _ZOOKEEPER,
    pb.DESCRIPTOR.services_by_name["Routing"].full_name: _ZOOKEEPER,
    LIVENESS: frozenset(),  # SERVING until shutdown (see daemon/server/probes.py)
}
"""Every service health tells (``""``: the daemon as a whole), with the causes that make
it NOT_SERVING."""


class IngestPasses(Protocol):
    """The ingest loop, as health sees it."""

    @property
    def passed_at(self) -> float:
        """``time.monotonic()`` when the loop last came round (started a pass over its jobs)."""
        ...


class ConnectionWatch:
    """How long ZooKeeper has been unreachable, from kazoo's connection states.

    The listener only records a time (kazoo's listeners must never block)."""

    def __init__(self, client: KazooClient, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._lost_since: float | None = None if client.connected else clock()
        client.add_listener(self._on_state)

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.CONNECTED:
            self._lost_since = None
        elif self._lost_since is None:
            self._lost_since = self._clock()

    def lost_for(self) -> float:
        """Seconds since ZooKeeper was last reachable (0 while connected)."""
        since = self._lost_since
        if since is None or self._client.connected:
            return 0.0
        return self._clock() - since

    def close(self) -> None:
        self._client.remove_listener(self._on_state)


class IngestWatch:
    """Whether ingest is stuck (module docstring), judged from successive looks."""

    def __init__(
        self,
        catalog: Catalog,
        ingest: IngestPasses,
        stuck_after: float,
        loop_slack: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``loop_slack``: how long the loop may rightly sleep between passes (its longest
        poll interval), added to ``stuck_after`` for the loop's own check."""
        self._catalog = catalog
        self._ingest = ingest
        self._stuck_after = stuck_after
        self._loop_slack = loop_slack
        self._clock = clock
        # Per job: its newest ingested epoch at the last look, and since when it has been
        # behind a committed epoch with that newest epoch (None: not behind).
        self._behind: dict[str, tuple[int, float | None]] = {}

    def stuck(self) -> list[str]:
        """Why ingest is stuck, one line per job (and for the loop); empty when it is not."""
        now = self._clock()
        found: list[str] = []
        idle = now - self._ingest.passed_at
        if idle > self._stuck_after + self._loop_slack:
            found.append(f"the ingest loop has not come round for {idle:.0f} s")
        seen: dict[str, tuple[int, float | None]] = {}
        for entry in self._catalog.jobs():
            name = entry.descriptor.name
            newest, committed = entry.progress.newest, entry.committed
            damaged = any(epoch > newest for epoch in entry.problems)
            since: float | None = None
            if committed > newest and not damaged:
                before = self._behind.get(name)
                since = before[1] if before is not None and before[0] == newest else None
                since = now if since is None else since
                if now - since > self._stuck_after:
                    found.append(
                        f"job {name!r}: epoch {committed} is committed, and no epoch after {newest} "
                        f"was ingested for {now - since:.0f} s"
                    )
            seen[name] = (newest, since)
        self._behind = seen
        return found


class HealthMonitor:
    """Keeps ``servicer``'s statuses honest: looks every ``interval`` seconds on its own
    thread (waits go through an event :meth:`stop` sets)."""

    def __init__(
        self,
        servicer: health.HealthServicer,
        services: Mapping[str, frozenset[str]],
        ingest: IngestWatch,
        zookeeper: ConnectionWatch | None,
        session_timeout: float,
        metrics: DaemonMetrics,
        interval: float = 0.5,
    ) -> None:
        """``services``: each service name (``""`` overall) with the causes that make it NOT_SERVING."""
        self._servicer = servicer
        self._services = dict(services)
        self._ingest = ingest
        self._zookeeper = zookeeper
        self._session_timeout = session_timeout
        self._metrics = metrics
        self._interval = interval
        self._causes: dict[str, list[str]] = {}
        self._statuses: dict[str, int] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)

    def causes(self) -> dict[str, list[str]]:
        """What makes the daemon unhealthy now: cause -> explanations (empty: healthy)."""
        found: dict[str, list[str]] = {}
        if self._zookeeper is not None:
            lost = self._zookeeper.lost_for()
            if lost > self._session_timeout:
                found[ZOOKEEPER_LOST] = [
                    f"ZooKeeper unreachable for {lost:.0f} s (session timeout {self._session_timeout:g} s)"
                ]
        stuck = self._ingest.stuck()
        if stuck:
            found[INGEST_STUCK] = stuck
        return found

    def update(self) -> None:
        """Look once and set every service's status."""
        causes = self.causes()
        if causes.keys() != self._causes.keys():
            if causes:
                log.warning("health: NOT_SERVING: %s", "; ".join(w for why in causes.values() for w in why))
            else:
                log.info("health: SERVING again")
        self._causes = causes
        for cause in (ZOOKEEPER_LOST, INGEST_STUCK):
            self._metrics.not_serving.labels(cause).set(1 if cause in causes else 0)
        for service, depends in self._services.items():
            status = NOT_SERVING if depends & causes.keys() else SERVING
            if self._statuses.get(service) != status:  # each set is sent to every health Watch
                self._servicer.set(service, status)
                self._statuses[service] = status

    def start(self) -> None:
        self.update()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(5)
        if self._zookeeper is not None:
            self._zookeeper.close()

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self.update()
            except Exception:  # a look that fails must not end health checking
                log.exception("health: look failed")
