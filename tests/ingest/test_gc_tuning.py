"""The collector tuning the daemon's process applies."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from epochstate.daemon.gc_tuning import YOUNG_GENERATION_THRESHOLD, freeze_startup_objects, tune_for_ingest


@pytest.fixture
def restored_collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_collector")
def test_young_generation_is_collected_less_often_and_startup_objects_are_frozen() -> None:
    _, middle, old = gc.get_threshold()
    tune_for_ingest()
    assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD, middle, old)
    gc.unfreeze()
    freeze_startup_objects()
    assert gc.get_freeze_count() > 1000  # the interpreter's and the test session's objects
    # Cycles are still collected, only in larger batches.
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1
