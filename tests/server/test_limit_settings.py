"""The ``limit_<kind>`` settings: the names users set (file keys, environment) reach the limiter."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochstate.daemon.config import ConfigError, load_settings
from epochstate.daemon.server.limits import CallKind, CallLimits


def test_every_kind_is_set_by_its_flat_key_or_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("limit_admin: 3\nlimit_unary_reads: 5\n")
    monkeypatch.setenv("EPOCHSTATE_LIMIT_STREAMS", "2")
    monkeypatch.setenv("EPOCHSTATE_LIMIT_UNARY_READS", "7")  # the environment beats the file
    settings = load_settings(config, limit_reports=4)

    assert set(settings.call_limits) == {kind.value for kind in CallKind}
    limits = CallLimits(**settings.call_limits)
    assert {kind: limits.of(kind) for kind in CallKind} == {
        CallKind.UNARY_READ: 7,
        CallKind.WAITING_READ: 128,
        CallKind.STREAM: 2,
        CallKind.REPORT: 4,
        CallKind.ADMIN: 3,
    }


def test_a_limit_below_one_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHSTATE_LIMIT_WAITING_READS", "0")
    with pytest.raises(ConfigError, match="limit_waiting_reads: Input should be greater than or equal to 1"):
        load_settings()
