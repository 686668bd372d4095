"""The daemon's servicer over a secondary of its store (serving processes, in-process reads).

A secondary shows what it caught up to, at most ``interval`` old. A read naming an
epoch beyond that (an exact epoch, or ``at_least``), or a job it does not know yet,
makes it catch up first, so it answers such a read as the daemon would right now
rather than "not ready" until its next look.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from epochstate.core.errors import EpochStateError
from epochstate.daemon.server.service import EpochStateService
from epochstate.daemon.server.status import domain_errors
from epochstate.daemon.store.errors import StoreDamaged
from epochstate.daemon.store.secondary_catalog import SecondaryCatalog
from epochstate.v1 import epochstate_pb2 as pb

log = logging.getLogger(__name__)


class SecondaryService(EpochStateService):
    """:class:`EpochStateService` reading ``secondary``'s store, catching up before a read
    that names what it has not published yet."""

    def __init__(self, secondary: SecondaryCatalog, **kwargs: Any) -> None:
        super().__init__(secondary.store, secondary.catalog, views=secondary.views, **kwargs)
        self._secondary = secondary

    def _ahead(self, ref: pb.StoreRef, selector: pb.EpochSelector) -> None:
        kind = selector.WhichOneof("kind")
        target = selector.exact if kind == "exact" else selector.at_least if kind == "at_least" else -1
        try:
            newest = self._secondary.catalog.get(ref.job).progress.newest
        except EpochStateError:
            newest = -1
            target = max(target, 0)
        if target > newest:
            try:
                self._secondary.catch_up()
            except StoreDamaged as error:
                # A catch-up can meet a file the daemon's compaction just removed; the read
                # goes on with what was published (never a wrong answer), the next look retries.
                log.warning("%s", error)

    @domain_errors
    def Get(self, request: pb.GetRequest, context: grpc.ServicerContext) -> bytes:
        self._ahead(request.store, request.epoch)
        # The read itself, not super().Get: its error handling is this method's already.
        return self._get(request, context)

    @domain_errors
    def MultiGet(self, request: pb.MultiGetRequest, context: grpc.ServicerContext) -> bytes:
        self._ahead(request.store, request.epoch)
        return super().MultiGet(request, context)

    @domain_errors
    def Scan(self, request: pb.ScanRequest, context: grpc.ServicerContext) -> bytes:
        self._ahead(request.store, request.epoch)
        return super().Scan(request, context)
