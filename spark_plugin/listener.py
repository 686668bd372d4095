"""A StreamingQueryListener that reports each committed epoch to an epochstate daemon.

Guarantees for the Spark job: the listener never raises into Spark and never waits
on the daemon. Reports go through a bounded queue to one background thread; when
the daemon is down or slow, reports are dropped (counted, with a warning now and
then) — the daemon finds every committed epoch in the checkpoint anyway, the push
only makes it see them sooner.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

import grpc

from epochstate.client.tls import TlsOptions, open_channel
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc

try:  # pyspark is an optional dependency of the package, required here
    from pyspark.sql.streaming.listener import StreamingQueryListener
except ImportError as error:  # pragma: no cover - exercised only without pyspark
    raise ImportError("epochstate.spark_plugin needs pyspark: pip install 'epochstate[spark]'") from error

log = logging.getLogger(__name__)


def report_of(progress: Any, checkpoints: Mapping[str, str]) -> pb.ReportEpochRequest:
    """The report for one QueryProgressEvent's progress (epoch = batch id)."""
    job = progress.name or str(progress.id)
    return pb.ReportEpochRequest(
        job=job,
        query_id=str(progress.id),
        run_id=str(progress.runId),
        epoch=int(progress.batchId),
        checkpoint=checkpoints.get(job, ""),
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

    ``tls``: how to reach a daemon that requires TLS and an identity with the
    ``report`` role (a client certificate or a token file); None: the
    ``EPOCHSTATE_TLS_*`` environment variables of the driver. Unreadable TLS
    files raise at construction, so a misconfigured listener fails at ``attach``.
    """

    def __init__(
        self,
        target: str,
        *,
        checkpoints: Mapping[str, str] | None = None,
        timeout: float = 2.0,
        queue_size: int = 1000,
        tls: TlsOptions | None = None,
    ) -> None:
        self.target = target
        self.checkpoints = dict(checkpoints or {})
        self.timeout = timeout
        self.sent = 0
        self.dropped = 0
        self._queue: queue.Queue[pb.ReportEpochRequest | None] = queue.Queue(queue_size)
        self._last_warning = 0.0
        self._channel = open_channel(target, tls)
        self._stub = pb_grpc.EpochStateStub(self._channel)
        self._thread = threading.Thread(target=self._send_loop, name="epochstate-reporter", daemon=True)
        self._thread.start()

    # -- StreamingQueryListener (called by Spark's listener bus) -------------------

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            self._offer(report_of(event.progress, self.checkpoints))
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
                self._stub.ReportEpoch(report, timeout=self.timeout)
                self.sent += 1
            except grpc.RpcError as error:
                self._drop(error.code().name if hasattr(error, "code") else str(error))
            except Exception:
                log.exception("epochstate: epoch report failed")
                self.dropped += 1

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (up to ``timeout``), then release the channel."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)
        self._channel.close()


def attach(
    spark: Any,
    target: str = "127.0.0.1:7070",
    *,
    checkpoints: Mapping[str, str] | None = None,
    tls: TlsOptions | None = None,
) -> EpochReporter:
    """Report every streaming query of ``spark`` to the daemon at ``target``.

    A query's job name is its ``queryName`` (its id when unnamed). Give
    ``checkpoints`` (job name -> checkpoint location) to let the daemon start
    following a job it was not configured with on the first report (within the
    daemon's ``auth.checkpoint_roots`` when it has auth on). ``tls``: see
    :class:`EpochReporter`.
    """
    reporter = EpochReporter(target, checkpoints=checkpoints, tls=tls)
    spark.streams.addListener(reporter)
    return reporter
