"""Power loss under the store itself: an epoch reported as written is never lost.

A child process writes epochs (with retention) into a real RocksDB store and
prints each epoch once ``apply_epoch`` returned: that is the moment the daemon
announces it. The test kills the child at a random point, loses every write that
was not synced (:mod:`tests.fixtures.powerloss`), reopens the store and checks
each retained epoch against the model, then lets the child go on from there.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from epochstate.daemon.codec import keycodec
from epochstate.daemon.store.versioned import StoreOptions, VersionedStore
from tests.fixtures.powerloss import PowerLoss

ROUNDS = 4 if os.environ.get("CI") == "true" else 8

# The child: epochs of 2,000 changed keys out of 6,000 (some removed), retention of
# 5 epochs, each epoch printed once written.
WRITER = """
import sys
from epochstate.daemon.codec import keycodec
from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.versioned import StoreOptions, VersionedStore

store = VersionedStore(sys.argv[1], StoreOptions(sync_writes=sys.argv[2] == "sync"))
job = store.job("j") or store.add_job("j", "/cp", "q", "hdfs")
stores = store.stores("j")
sid = stores[0].store_id if stores else store.add_store("j", 0, "agg", "default", 1, "{}", "{}").store_id
epoch = store.progress(job.job_id).newest + 1
while True:
    changes = {}
    for i in range(2000):
        k = (epoch * 977 + i * 3) % 6000
        changes[keycodec.encode_fields((k,))] = None if i % 10 == 9 else keycodec.encode((epoch, k))
    record = EpochRecord(epoch, epoch, epoch, 0)
    store.apply_epoch(job, epoch, {sid: changes}, record, fresh=epoch == 0)
    print(epoch, flush=True)
    store.apply_retention(job, epoch - 4)
    epoch += 1
"""


def model(upto: int) -> dict[int, dict[bytes, bytes]]:
    """The state after each epoch ``0..upto``, as the child writes it."""
    live: dict[bytes, bytes] = {}
    states: dict[int, dict[bytes, bytes]] = {}
    for epoch in range(upto + 1):
        for i in range(2000):
            k = (epoch * 977 + i * 3) % 6000
            key = keycodec.encode_fields((k,))
            if i % 10 == 9:
                live.pop(key, None)
            else:
                live[key] = keycodec.encode((epoch, k))
        states[epoch] = dict(live)
    return states


def run_until_killed(root: Path, power: PowerLoss, mode: str, delay: float) -> list[int]:
    """Run the child for ``delay`` seconds after its first epoch, SIGKILL it; the epochs it reported."""
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **power.env()},
        text=True,
    )
    assert child.stdout is not None
    reported: list[int] = []
    first = threading.Event()

    def read() -> None:
        for line in child.stdout:  # type: ignore[union-attr]
            reported.append(int(line))
            first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first.wait(60), child.stderr.read() if child.stderr else "no output"
    time.sleep(delay)
    child.kill()
    child.wait(10)
    reader.join(10)
    return list(reported)


def check(root: Path, states: dict[int, dict[bytes, bytes]]) -> tuple[int, int]:
    """Every epoch the reopened store serves equals the model; its (oldest, newest)."""
    store = VersionedStore(root)
    try:
        job = store.job("j")
        if job is None:
            return -1, -1
        (descriptor,) = store.stores("j")
        progress = store.progress(job.job_id)
        view = store.view()
        for epoch in range(progress.oldest, progress.newest + 1):
            scanned = view.scan(descriptor.store_id, epoch, b"", None, 100_000)
            assert {v.encoded_key: v.payload for v in scanned} == states[epoch], f"epoch {epoch}"
        del view
        return progress.oldest, progress.newest
    finally:
        store.close()


def test_power_loss_never_takes_back_a_reported_epoch(tmp_path: Path) -> None:
    rng = random.Random(20261124)
    root = tmp_path / "store"
    power = PowerLoss(root, tmp_path / "durable")
    states = model(2000)
    newest = -1
    table = []
    for round_ in range(ROUNDS):
        power.baseline()
        reported = run_until_killed(root, power, "sync", rng.uniform(0.0, 0.6))
        power.lose_power()
        oldest, newest = check(root, states)
        table.append((round_, reported[0], reported[-1], oldest, newest))
        assert newest >= reported[-1], (
            f"round {round_}: epoch {reported[-1]} was reported, the store has {newest}"
        )
    print("round  first  last reported  after power loss: oldest newest")
    for r, first, last, low, high in table:
        print(f"{r:5d}  {first:5d}  {last:13d}  {low:24d} {high:6d}")


def test_without_sync_a_power_loss_takes_back_reported_epochs(tmp_path: Path) -> None:
    """The control: the same run with sync_writes off loses epochs it had reported, so
    the shim does drop what was not synced."""
    root = tmp_path / "store"
    power = PowerLoss(root, tmp_path / "durable")
    power.baseline()
    reported = run_until_killed(root, power, "nosync", 0.3)
    power.lose_power()
    _, newest = check(root, model(reported[-1]))
    print(f"reported up to epoch {reported[-1]}; after the power loss the store has {newest}")
    assert newest < reported[-1]


def test_sync_writes_is_on_by_default() -> None:
    from epochstate.daemon.config import DaemonSettings

    assert StoreOptions().sync_writes and DaemonSettings().sync_writes
