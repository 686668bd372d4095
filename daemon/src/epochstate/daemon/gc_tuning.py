"""The cyclic garbage collector, tuned for a process that ingests.

Ingest allocates a few short-lived tuples and lists per state row; with CPython's
default young-generation threshold (700 allocations) the collector runs every few
hundred rows, a noticeable share of ingest time spent finding nothing to
collect. State rows hold no reference cycles, so collecting
the young generation every 50,000 allocations loses nothing but a few MB of
garbage held a little longer.

A process-wide setting: :func:`epochstate.daemon.runtime.run` (the daemon's process)
and the ingest benchmark call it; an application that embeds a daemon decides for
itself.
"""

from __future__ import annotations

import gc

YOUNG_GENERATION_THRESHOLD = 50_000


def tune_for_ingest() -> None:
    """Collect the young generation every :data:`YOUNG_GENERATION_THRESHOLD`
    allocations (older generations keep their default ratios)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)


def freeze_startup_objects() -> None:
    """Move every object alive now (modules, settings, the served handlers) to the
    permanent generation, so full collections no longer walk them."""
    gc.collect()
    gc.freeze()
