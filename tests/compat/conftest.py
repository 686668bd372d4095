"""The compatibility suite's order in a test session (its fixtures are in ``fixtures``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.releases import UNDER_TEST
from tests.compat.venvs import warm_up


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The compatibility tests' venvs are made (when missing) in the background from the
    start. In one process the tests run last, so the rest of the session hides the
    downloads; in several (pytest-xdist, whole files to a worker), they run first: their
    file is the longest, and one worker works through it while the others take the rest."""
    here = Path(__file__).parent
    compat = [item for item in items if here in item.path.parents]
    if compat:
        rest = [item for item in items if here not in item.path.parents]
        items[:] = compat + rest if hasattr(config, "workerinput") else rest + compat
        warm_up(UNDER_TEST)
