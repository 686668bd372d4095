"""The README's first command works: the demo runs end to end and its checks hold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_demo_runs_and_pinned_answers_hold(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "epochstate.cli.app",
            "demo",
            "--duration",
            "4",
            "--interval",
            "2",
            "--trigger",
            "1",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "COLUMNS": "200"},
    )
    print(result.stdout)  # the trace, for -s
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "asked again -> identical" in result.stdout
    assert "DIFFERENT" not in result.stdout
    assert "Spark's own state reader" in result.stdout
