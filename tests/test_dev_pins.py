"""The development environment's pins (.ci/constraints-dev.txt, which `make` installs the venv
with on Python 3.11): every requirement of ``.[dev]`` and of every distribution is pinned, at
a version it allows, and so is every requirement of a pin. A pin that no longer fits a
``pyproject.toml`` would stop the venv's install on a fresh machine: ``make constraints``."""

from __future__ import annotations

from tests import distributions, pins

DEV_PINS = distributions.ROOT / ".ci" / "constraints-dev.txt"


def test_every_dev_requirement_is_pinned_to_a_version_it_allows() -> None:
    everything = ["epochstate[dev]", *(d.name for d in distributions.members())]
    wanted = distributions.third_party(everything)
    pins.assert_each_pinned(wanted, pins.read(DEV_PINS), ".ci/constraints-dev.txt")


def test_the_dev_pins_are_what_the_venv_runs_and_are_closed() -> None:
    pinned = pins.read(DEV_PINS)
    # The venv is made with these pins (the Makefile's stamp depends on the file).
    assert pins.assert_closed(pinned) == len(pinned)
