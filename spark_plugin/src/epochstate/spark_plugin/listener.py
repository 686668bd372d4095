"""A StreamingQueryListener that reports each committed epoch to epochstate daemons.

Guarantees for the Spark job: the listener never raises into Spark and never waits
on a daemon. Reports go through a bounded queue to one background thread, which
sends each to a home daemon and to every replica of the job (``delivery``); when
the daemons are down or slow, reports are dropped (counted, with a warning now and
then) — a daemon finds every committed epoch in the checkpoint anyway, the push
only makes it see them sooner.

A job's report names its checkpoint (``checkpoints``) and, for a group, its
placement (``placements``): the home daemon then follows the job (standalone) or
defines it in its group, once; a report never changes a job the group defines.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from epochstate.client.tls import TlsOptions
from epochstate.spark_plugin.delivery import ReportDelivery
from epochstate.v1 import epochstate_pb2 as pb

try:  # pyspark is an optional dependency of the package, required here
    from pyspark.sql.streaming.listener import StreamingQueryListener
except ImportError as error:  # pragma: no cover - exercised only without pyspark
    raise ImportError("epochstate.spark_plugin needs pyspark: pip install 'epochstate[spark]'") from error

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """How a group spreads a job that a report defines: ``replicas`` daemons follow each
    of its ``shards``, which split its ``partitions`` Spark partitions (0: as many as
    its checkpoint says). Used only when the group has no job of that name yet."""

    replicas: int = 1
    shards: int = 1
    partitions: int = 0

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.shards < 1 or self.partitions < 0:
            raise ValueError(f"replicas and shards must be >= 1, partitions >= 0: {self}")

    def to_proto(self) -> pb.JobPlacement:
        return pb.JobPlacement(replicas=self.replicas, shards=self.shards, partitions=self.partitions)


def report_of(
    progress: Any, checkpoints: Mapping[str, str], placements: Mapping[str, Placement] | None = None
) -> pb.ReportEpochRequest:
    """The report for one QueryProgressEvent's progress (epoch = batch id)."""
    job = progress.name or str(progress.id)
    placement = (placements or {}).get(job)
    checkpoint = checkpoints.get(job, "")
    return pb.ReportEpochRequest(
        job=job,
        query_id=str(progress.id),
        run_id=str(progress.runId),
        epoch=int(progress.batchId),
        checkpoint=checkpoint,
        placement=placement.to_proto() if placement is not None and checkpoint else None,
        sources=[
            pb.SourcePosition(
                source=str(s.description),
                start_offset_json=str(s.startOffset or ""),
                end_offset_json=str(s.endOffset or ""),
            )
            for s in progress.sources
        ],
        state_operators=[
            pb.StateOperatorProgress(
                operator_name=str(op.operatorName),
                num_rows_total=int(op.numRowsTotal),
                num_rows_updated=int(op.numRowsUpdated),
                num_rows_removed=int(op.numRowsRemoved),
            )
            for op in progress.stateOperators
        ],
    )


class EpochReporter(StreamingQueryListener):
    """Reports committed epochs of every streaming query of a session.

    ``target``: one daemon address or several, comma-separated (``a:7070,b:7070``);
    the first that answers is the home daemon, the others stand in when it is down.
    ``checkpoints``: job name -> checkpoint location, so that the home daemon
    follows the job, or defines it in its group placed as ``placements`` says
    (job name -> :class:`Placement`; default: one replica, one shard).
    ``tls``: how to reach a daemon that requires TLS and an identity with the
    ``report`` role (a client certificate or a token file); None: the
    ``EPOCHSTATE_TLS_*`` environment variables of the driver. Unreadable TLS
    files raise at construction, so a misconfigured listener fails at ``attach``.

    Counters (read them, never write): ``sent`` reports that a daemon took,
    ``dropped`` reports that none took (each report counts in one of the two);
    ``pushed`` deliveries to replicas other than the home daemon; ``refused``
    reports the home daemon answered with an error (``last_refusal``: its code).
    """

    def __init__(
        self,
        target: str,
        *,
        checkpoints: Mapping[str, str] | None = None,
        placements: Mapping[str, Placement] | None = None,
        timeout: float = 2.0,
        queue_size: int = 1000,
        tls: TlsOptions | None = None,
    ) -> None:
        self.target = target
        self.checkpoints = dict(checkpoints or {})
        self.placements = dict(placements or {})
        self.timeout = timeout
        self.sent = 0
        self.pushed = 0
        self.refused = 0
        self.last_refusal = ""
        self.dropped = 0
        self._queue: queue.Queue[pb.ReportEpochRequest | None] = queue.Queue(queue_size)
        self._last_warning = 0.0
        targets = [t.strip() for t in target.split(",") if t.strip()]
        self._delivery = ReportDelivery(targets, tls, timeout)
        self._thread = threading.Thread(target=self._send_loop, name="epochstate-reporter", daemon=True)
        self._thread.start()

    # -- StreamingQueryListener (called by Spark's listener bus) -------------------

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            self._offer(report_of(event.progress, self.checkpoints, self.placements))
        except Exception:  # never into Spark
            log.exception("epochstate: could not build an epoch report")

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    # -- delivery --------------------------------------------------------------------

    def _offer(self, report: pb.ReportEpochRequest) -> None:
        try:
            self._queue.put_nowait(report)
        except queue.Full:
            self._drop("queue full")

    def _drop(self, why: str) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._last_warning > 30:
            self._last_warning = now
            log.warning(
                "epochstate: dropped %d epoch report(s) for %s (%s); the daemon "
                "will find the epochs in the checkpoint",
                self.dropped,
                self.target,
                why,
            )

    def _send_loop(self) -> None:
        while True:
            report = self._queue.get()
            if report is None:
                return
            try:
                done = self._delivery.deliver(report)
            except Exception:
                log.exception("epochstate: epoch report failed")
                self.dropped += 1
                continue
            self.pushed += done.replicas
            if done.refused:
                self.refused += 1
                self.last_refusal = done.refused
            if done.anywhere:
                self.sent += 1
            else:
                self._drop(done.refused or "no daemon answered")

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (up to ``timeout``), then release the channel."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)
        self._delivery.close()


def attach(
    spark: Any,
    target: str = "127.0.0.1:7070",
    *,
    checkpoints: Mapping[str, str] | None = None,
    placements: Mapping[str, Placement] | None = None,
    tls: TlsOptions | None = None,
) -> EpochReporter:
    """Report every streaming query of ``spark`` to the daemon(s) at ``target``
    (comma-separated) and to the daemons that serve each job.

    A query's job name is its ``queryName`` (its id when unnamed). Give
    ``checkpoints`` (job name -> checkpoint location) to let a standalone daemon
    start following a job it was not configured with on the first report, or a
    daemon of a group define the job in its group, placed as ``placements`` says
    (within the daemon's ``auth.checkpoint_roots`` when it has auth on).
    ``tls``: see :class:`EpochReporter`.
    """
    reporter = EpochReporter(target, checkpoints=checkpoints, placements=placements, tls=tls)
    spark.streams.addListener(reporter)
    return reporter
