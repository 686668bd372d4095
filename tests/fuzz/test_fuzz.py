"""The parsers of checkpoint files under fuzzing: every seed and every past finding
replayed in-process, then a bounded coverage-guided run of each target (atheris).

The bounded run is repeatable: ``FUZZ_CI_RUNS`` inputs per target (default 2000)
from a fixed seed, so a commit's verdict is the same on every run and machine
(``FUZZ_CI_SECONDS``, default 120, only caps a machine too slow to get there).
``make fuzz`` explores with fresh seeds for longer. See docs/development.md ("Fuzzing").
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from epochstate.daemon.sources.errors import CorruptStateFile
from epochstate.daemon.sources.rocksdb.sst import SstFormatError, sst_writes_after
from epochstate.daemon.sources.rows.lz4stream import read_lz4_block_stream
from tests.fuzz.run import run_bounded, stat
from tests.fuzz.targets import CORPUS, TARGETS, check, fix_lz4_checksums, fix_sst_checksums, inputs

CI_RUNS = int(os.environ.get("FUZZ_CI_RUNS", "2000"))
CI_SECONDS = float(os.environ.get("FUZZ_CI_SECONDS", "120"))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_seeds_and_past_findings_raise_only_domain_errors(name: str) -> None:
    replayed = 0
    for _path, data in inputs(name):
        check(TARGETS[name], data)  # anything but a domain error fails the test
        replayed += 1
    assert len(list((CORPUS / name).iterdir())) > 0, f"no seeds for {name}"
    assert replayed >= len(list((CORPUS / name).iterdir()))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_bounded_fuzzing_finds_nothing(name: str, tmp_path: Path) -> None:
    done = run_bounded(name, CI_SECONDS, tmp_path, timeout=CI_SECONDS + 120, runs=CI_RUNS)
    findings = sorted(p.name for p in (tmp_path / "findings" / name).iterdir())
    assert done.returncode == 0 and not findings, (
        f"{name}: {findings} in {tmp_path / 'findings' / name}; copy each to "
        f"tests/fuzz/regressions/{name}/ with the fix\n"
        f"(atheris prints the Python traceback on stdout)\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    executed = stat(done.stderr, "stat::number_of_executed_units")
    assert executed >= len(list((CORPUS / name).iterdir())), done.stderr[-2000:]


def _seed(target: str, suffix: bytes = b"") -> bytes:
    for path in sorted((CORPUS / target).iterdir()):
        data = path.read_bytes()
        if data.endswith(suffix):
            return data
    raise AssertionError(f"no seed of {target} ends with {suffix!r}")


def test_checksum_fixups_reach_past_the_checksums() -> None:
    stream = _seed("lz4_block_stream")
    damaged = bytearray(stream)
    struct.pack_into("<I", damaged, 17, struct.unpack_from("<I", stream, 17)[0] ^ 1)
    with pytest.raises(CorruptStateFile, match="checksum mismatch"):
        read_lz4_block_stream(bytes(damaged))
    assert fix_lz4_checksums(bytes(damaged)) == stream

    table = _seed("sst")
    with pytest.raises(SstFormatError, match="entries from"):  # reads every block, then compares keys
        sst_writes_after(table, b"", b"", 0)
    assert fix_sst_checksums(table) == table  # a sound file is left as it is
    footer_start = len(table) - 53
    broken = bytearray(table)
    broken[footer_start - 1] ^= 0xFF  # the last checksum byte before the footer
    with pytest.raises(SstFormatError, match="checksum mismatch"):
        sst_writes_after(bytes(broken), b"", b"", 0)
    assert fix_sst_checksums(bytes(broken)) == table
