"""Run a fuzz target under atheris (libFuzzer, coverage-guided), or all of them.

    python -m tests.fuzz.run TARGET [libFuzzer options] [corpus directories]
    python -m tests.fuzz.run --all --seconds 60 [--work var/fuzz]

One target: the process is libFuzzer's, with the epochstate modules instrumented
for coverage; an input that makes the target raise anything but a domain error
(see :mod:`tests.fuzz.targets`) is a crash, an input that runs longer than
``-timeout`` seconds a hang, a process above ``-rss_limit_mb`` a memory finding.
libFuzzer writes the input as ``<artifact_prefix>crash-<sha1>`` (or ``timeout-``,
``oom-``) and exits non-zero.

``--all`` runs every target in turn for ``--seconds`` each (``make fuzz``), with
the committed seeds and a working corpus under ``--work`` that grows across
runs, and writes each target's findings to ``<work>/findings/<target>/``. It exits
non-zero when any target found something. A finding becomes a regression: fix
the parser, copy the input to ``tests/fuzz/regressions/<target>/`` (the tests
replay it on every run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parents[2]

# libFuzzer's per-input limits for every run: a hang and a memory hog are findings.
INPUT_TIMEOUT_S = 10
RSS_LIMIT_MB = 2048
MAX_INPUT_BYTES = 64 * 1024

# The seed of a repeatable run (the bounded one in `make pytest`): the same commit
# tries the same inputs every time, so the suite's verdict never depends on luck.
# Exploring with fresh seeds is `make fuzz`'s job; what it finds becomes a regression.
REPEATABLE_SEED = 20191126


# Token dictionaries (``tests/fuzz/dicts/``) of the targets whose inputs hold JSON.
DICTIONARIES = {
    "checkpoint_log": "json.dict",
    "schema_file": "json.dict",
    "schema_codecs": "json.dict",
    "changelog": "json.dict",
}


def libfuzzer_args(target: str, seconds: float, work: Path, runs: int | None = None) -> list[str]:
    """The command line of one bounded run of ``target``: a working corpus in
    ``work/corpus/<target>`` (new inputs go there), then the committed seeds and
    regressions; findings in ``work/findings/<target>/``.

    With ``runs``, the run is repeatable: libFuzzer's seed is fixed and it stops
    after ``runs`` inputs (``seconds`` only caps it on a machine too slow to get
    there, which then tries a prefix of the same inputs). Without, it explores:
    a random seed, for ``seconds``."""
    from tests.fuzz.targets import CORPUS, REGRESSIONS

    corpus = work / "corpus" / target
    findings = work / "findings" / target
    corpus.mkdir(parents=True, exist_ok=True)
    findings.mkdir(parents=True, exist_ok=True)
    seeds = [str(d) for d in (CORPUS / target, REGRESSIONS / target) if d.is_dir()]
    return [
        sys.executable,
        "-m",
        "tests.fuzz.run",
        target,
        f"-max_total_time={max(1, round(seconds))}",
        *([f"-runs={runs}", f"-seed={REPEATABLE_SEED}"] if runs is not None else []),
        f"-timeout={INPUT_TIMEOUT_S}",
        f"-rss_limit_mb={RSS_LIMIT_MB}",
        f"-max_len={MAX_INPUT_BYTES}",
        f"-artifact_prefix={findings}/",
        "-print_final_stats=1",
        *([f"-dict={ROOT / 'tests/fuzz/dicts' / DICTIONARIES[target]}"] if target in DICTIONARIES else []),
        str(corpus),
        *seeds,
    ]


def fuzz_one(target: str, argv: list[str]) -> None:
    """Become libFuzzer on ``target`` (never returns)."""
    import atheris  # type: ignore[import-untyped]

    with atheris.instrument_imports(include=["epochstate"]):
        from tests.fuzz import targets

    chosen = targets.TARGETS[target]

    def one_input(data: bytes) -> None:
        targets.check(chosen, data)

    atheris.Setup([sys.argv[0], *argv], one_input)
    atheris.Fuzz()


def run_bounded(
    target: str, seconds: float, work: Path, timeout: float | None = None, runs: int | None = None
) -> subprocess.CompletedProcess[str]:
    """One bounded libFuzzer run of ``target`` (see :func:`libfuzzer_args`), in its own
    scratch directory, removed afterwards. Python's hash seed is fixed too, so a
    repeatable run (``runs``) takes the same paths through set and dict orders."""
    from tests.fuzz.targets import SCRATCH_ENV, memory_scratch_root

    scratch = tempfile.mkdtemp(prefix="epochstate-fuzz-", dir=memory_scratch_root())
    try:
        return subprocess.run(
            libfuzzer_args(target, seconds, work, runs),
            cwd=ROOT,
            env={**os.environ, SCRATCH_ENV: scratch, "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def fuzz_all(seconds: float, work: Path) -> int:
    from tests.fuzz.targets import TARGETS

    failed = []
    for name in TARGETS:
        started = time.monotonic()
        done = run_bounded(name, seconds, work)
        runs = stat(done.stderr, "stat::number_of_executed_units")
        took = time.monotonic() - started
        verdict = "ok" if done.returncode == 0 else f"FINDING (exit {done.returncode})"
        print(f"{name:18} {runs:>9} inputs in {took:5.1f} s  {verdict}", flush=True)
        if done.returncode != 0:
            failed.append(name)
            print(done.stderr[-4000:], file=sys.stderr)
    if failed:
        print(f"findings in {', '.join(failed)}: see {work / 'findings'}", file=sys.stderr)
    return 1 if failed else 0


def stat(libfuzzer_stderr: str, name: str) -> int:
    """A number of libFuzzer's final stats (``-print_final_stats=1``), 0 if absent."""
    for line in libfuzzer_stderr.splitlines():
        if line.startswith(name + ":"):
            return int(line.rsplit(":", 1)[-1].strip())
    return 0


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] != "--all" and not sys.argv[1].startswith("-"):
        fuzz_one(sys.argv[1], sys.argv[2:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--all", action="store_true", required=True, help="run every target in turn")
    parser.add_argument("--seconds", type=float, default=60.0, help="per target (default 60)")
    parser.add_argument("--work", type=Path, default=Path("var/fuzz"), help="working corpus and findings")
    args = parser.parse_args()
    sys.exit(fuzz_all(args.seconds, args.work))


if __name__ == "__main__":
    main()
