"""Where a committed epoch's report goes: a home daemon, then every daemon that serves the job.

A report goes first to the *home* daemon, the first of the listener's targets that
answers (the next one when a daemon is unreachable). The full report names the
job's checkpoint (and its placement), so the home daemon starts following the job
(a standalone daemon) or defines it in its group (a daemon of a group); it also
looks for the epoch if it follows the job itself.

Then the report, without checkpoint or placement, goes to each daemon that
``Routing.Locate`` lists as a replica of the job, whether it serves yet or not:
the push is what makes a replica see the epoch at once, its poll of the
checkpoint is only the fallback. A location is asked of the home daemon and kept
for :data:`RELOCATE_SECONDS`; it is asked again at once (at most once per report)
when a replica is unreachable or answers that it does not follow the job (the
group moved it), and after :data:`RETRY_SECONDS` while the job is not located
yet (its group has not assigned it) or is located on fewer daemons than the
report's placement asks (its group is still assigning it). Until the job is
located on that many daemons, the report also goes to the listener's other
targets that answered lately: a target that does not follow the job says so and
nothing happens, one that does sees the epoch at once.

Every call has the listener's timeout; nothing here raises a gRPC error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from epochstate.client.errors import error_info
from epochstate.client.routing import Replicas
from epochstate.client.tls import TlsOptions
from epochstate.core import reasons
from epochstate.v1 import epochstate_pb2 as pb

log = logging.getLogger(__name__)

RELOCATE_SECONDS = 30.0
"""How long a located job's replicas are trusted (a replica added to the job is found then)."""
RETRY_SECONDS = 1.0
"""How soon a job that could not be located is asked about again."""

# The daemon did not answer: another target may.
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass(frozen=True)
class Located:
    """A job's replicas (node, address), as the daemon ``asked`` (node ``node``) answered at ``at``."""

    replicas: tuple[tuple[str, str], ...]
    asked: str
    node: str
    at: float

    def besides(self, home: str | None) -> list[str]:
        """The replicas' addresses, less the home daemon's (which had the report already)."""
        return [
            address
            for node, address in self.replicas
            if address != home and not (node == self.node and self.asked == home)
        ]

    def covers(self, wanted: int) -> bool:
        """Whether at least ``wanted`` daemons serve the job here (else its group is
        still assigning it, or it lacks members)."""
        return len({node for node, _ in self.replicas}) >= wanted


@dataclass
class Delivered:
    """What became of one report: reached the home daemon, how many replicas took it."""

    home: bool = False
    replicas: int = 0
    refused: str = ""  # the home daemon's error (its reason, else its code), when it answered one

    @property
    def anywhere(self) -> bool:
        return self.home or self.replicas > 0


def _code(error: grpc.RpcError) -> grpc.StatusCode | None:
    return error.code() if isinstance(error, grpc.Call) else None


class ReportDelivery:
    """Delivers reports to ``targets`` and the located replicas of each job. One thread at a time.

    Channels to the targets are opened at construction (so unreadable TLS files raise
    there, InvalidArgument); channels to replicas when first needed, with the same ``tls``.
    """

    def __init__(
        self,
        targets: Sequence[str],
        tls: TlsOptions | None,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not targets:
            raise ValueError("the listener needs at least one daemon address")
        self.targets = tuple(targets)
        self.timeout = timeout
        self._tls = TlsOptions.from_env() if tls is None else tls
        self._clock = clock
        # One connection each: reports are answered by a daemon's main process, which
        # serving processes forward them to, so more connections would spread nothing.
        self._replicas = Replicas(self._tls, (), connections=1)
        for target in self.targets:
            self._replicas.stub(target)
        self._home = 0  # index of the target that answered last
        self._located: dict[str, Located] = {}

    def deliver(self, report: pb.ReportEpochRequest) -> Delivered:
        """Send ``report`` to the home daemon, then to every other located replica of its job."""
        done = Delivered()
        home = self._to_home(report, done)
        if done.refused and done.refused not in (reasons.JOB_NOT_FOUND, "NOT_FOUND"):
            return done  # e.g. JOB_DEFINED: the job its replicas serve is not this report's
        push = pb.ReportEpochRequest()
        push.CopyFrom(report)
        push.ClearField("checkpoint")
        push.ClearField("placement")
        wanted = max(1, report.placement.replicas) if report.HasField("placement") else 1
        reached: set[str] = set()
        for attempt in range(2):
            located = self._location(report.job, home, wanted, fresh=attempt > 0)
            replicas = [] if located is None else located.besides(home)
            others = []
            if located is None or not located.covers(wanted):
                others = [t for t in self.targets if t != home and not self._replicas.suspect(t)]
            stale = False
            for address in replicas + others:
                if address in reached:
                    continue
                reached.add(address)
                # A target besides the located replicas may well not follow the job.
                stale |= not self._to_replica(push, address, done) and address in replicas
            if not stale:
                return done
            self._located.pop(report.job, None)
        return done

    def _to_home(self, report: pb.ReportEpochRequest, done: Delivered) -> str | None:
        """The home daemon that took the report (None: no target answered)."""
        for step in range(len(self.targets)):
            index = (self._home + step) % len(self.targets)
            target = self.targets[index]
            try:
                self._replicas.stub(target).ReportEpoch(report, timeout=self.timeout)
            except grpc.RpcError as error:
                code = _code(error)
                if code in _UNREACHABLE:
                    self._replicas.failed(target)
                    continue
                # It answered: the job is not its to follow (NOT_FOUND), or the report is
                # refused (JOB_DEFINED, CHECKPOINT_NOT_ALLOWED, ...). Replicas may still take it.
                self._home = index
                self._replicas.answered(target)
                info = error_info(error)
                done.refused = info.reason if info is not None else code.name if code is not None else "?"
                return target
            self._home = index
            self._replicas.answered(target)
            done.home = True
            return target
        return None

    def _to_replica(self, push: pb.ReportEpochRequest, address: str, done: Delivered) -> bool:
        """Whether the location still holds (the replica took the report, or refused it otherwise)."""
        try:
            self._replicas.stub(address).ReportEpoch(push, timeout=self.timeout)
        except grpc.RpcError as error:
            code = _code(error)
            if code in _UNREACHABLE:
                self._replicas.failed(address)
                return False
            return code != grpc.StatusCode.NOT_FOUND  # it does not follow the job (any longer)
        self._replicas.answered(address)
        done.replicas += 1
        return True

    def _location(self, job: str, home: str | None, wanted: int, *, fresh: bool) -> Located | None:
        """The replicas of ``job``, asked of the home daemon when the known ones are too old
        (or ``fresh``); None: not located. A location on fewer than ``wanted`` daemons is
        old after :data:`RETRY_SECONDS`."""
        now = self._clock()
        known = self._located.get(job)
        if known is not None and not fresh:
            age = now - known.at
            if age < (RELOCATE_SECONDS if known.covers(wanted) else RETRY_SECONDS):
                return known if known.replicas else None
        if home is None:
            return None
        try:
            response = self._replicas.routing(home).Locate(pb.LocateRequest(job=job), timeout=self.timeout)
        except grpc.RpcError as error:
            # NOT_FOUND: no daemon serves the job yet (its group has not assigned it);
            # PERMISSION_DENIED or UNIMPLEMENTED: the home daemon will not say. Asked again later.
            code = _code(error)
            if code not in (grpc.StatusCode.NOT_FOUND, *_UNREACHABLE):
                log.debug("epochstate: cannot locate job %s at %s: %s", job, home, error)
            self._located[job] = Located((), home, "", now)
            return None
        # A replica without an address is down (its node znode is gone): nothing to send to.
        replicas = sorted({(r.node, r.address) for s in response.shards for r in s.replicas if r.address})
        known = self._located[job] = Located(tuple(replicas), home, response.node, now)
        return known

    def close(self) -> None:
        self._replicas.close()
