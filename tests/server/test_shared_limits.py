"""The shared call counts of a daemon's processes, in-process: the file lock that makes
their check-and-take atomic, when another process holds it."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from epochstate.daemon.server.shared_limits import SharedCalls
from tests.fixtures.zookeeper import eventually


def waits_for_lock(inode: int) -> bool:
    """Whether some flock on the file numbered ``inode`` is waited for (``->`` in /proc/locks)."""
    return any("->" in line and f":{inode} " in line for line in Path("/proc/locks").read_text().splitlines())


def test_a_slot_is_taken_only_once_the_other_holder_lets_the_file_go(tmp_path: Path) -> None:
    calls = SharedCalls.create(tmp_path / "calls", 2, 1)
    # Another open file of the same path: flock tells it apart as it would another process.
    other = os.open(tmp_path / "calls", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        admitted: list[bool] = []
        taker = threading.Thread(target=lambda: admitted.append(calls.enter(0, 1)))
        taker.start()
        assert eventually(lambda: waits_for_lock(os.fstat(other).st_ino), timeout=10)
        assert admitted == []
        fcntl.flock(other, fcntl.LOCK_UN)
        taker.join(10)
        assert admitted == [True]
        assert calls.enter(0, 1) is False  # the limit of 1 counts the slot taken
        assert calls.in_flight(0) == 1
    finally:
        os.close(other)
        calls.close()
