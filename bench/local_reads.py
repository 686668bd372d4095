"""In-process reads (``local://``) against the daemon's gRPC reads, in one run.

    python bench/local_reads.py [--keys 100000] [--epochs 20] [--changed 10000]

Builds the state of bench/lookup.py (a real Spark aggregation, ``--keys`` keys),
follows it with a real daemon process, then, with Spark stopped, times on one
thread of this process: (a) Get pinned to an epoch over the daemon's Unix socket
(gRPC, the fastest transport); (b) the same Get through ``local://`` (the client's
stub: request in, parsed response out); (c) ``client.get`` through ``local://``
(with the key's and value's decoding into Python values); (d) MultiGet of 100 and
1,000 keys through ``local://``, keys/s and the share of a core the caller got
(keys/s on one core = keys/s / that share: other processes share the machine). Every answer of (b) and (d)
is checked equal to the daemon's before timing. (f) the floor of a MultiGet from Python:
the three RocksDB calls a key costs (seek, key, value) through rocksdict, nothing else,
on a RocksDB of as many versions as the state, keys/s per CPU-second: the same 1,000 keys
again and again, on a flushed table, so every block they touch stays in the CPU's caches.
(g) MultiGet of 1,000 keys through ``local://`` against its own floor, in alternating rounds:
the same three RocksDB calls for the same keys of the same requests, in the order the
service seeks them, through a reader of the daemon's store as ``local://`` opens it (the
daemon's data then sits where its reads find it: in memory tables or flushed), keys per
CPU-second of each and their ratio.
Targets: Get p50 <= 30 µs; MultiGet >= 500,000 keys/s; MultiGet >= 0.5 x the floor of (g), so
that the service's own work for a key costs at most what the key's RocksDB calls cost (500,000
is about that floor itself on a quiet machine: no room for any work of the service's).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.lookup import build_state, cycle_calls, interleaved, percentiles, timed
from bench.table import print_table
from epochstate.client import EpochStateClient
from epochstate.daemon.codec import keycodec
from epochstate.daemon.store import layout
from epochstate.daemon.store.secondary import SecondaryStore
from epochstate.devtools.local_daemon import LocalDaemon
from epochstate.devtools.spark_session import local_session
from epochstate.v1 import epochstate_pb2 as pb


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def seek_floor(path: Path, versions: int, users: list[int]) -> float:
    """Keys per CPU-second of the RocksDB calls a MultiGet makes per key (seek, key, value),
    on a RocksDB of ``versions`` versions keyed as the store keys them (prefix, key, epoch)."""
    from rocksdict import Options, Rdict

    db = Rdict(str(path), options=Options(raw_mode=True))
    rng = random.Random(2)
    for n in range(versions):
        db[b"d\x00\x00\x00\x01" + (n % 100_000).to_bytes(9, "big") + (n // 100_000).to_bytes(8, "big")] = (
            rng.randbytes(30)
        )
    db.flush()
    snapshot = db.snapshot()
    it = snapshot.iter()
    seek, key, value = it.seek, it.key, it.value
    wanted = [b"d\x00\x00\x00\x01" + (u % 100_000).to_bytes(9, "big") for u in users]
    rounds = 50
    started = cpu_seconds()
    for _ in range(rounds):
        for head in wanted:
            seek(head)
            key()
            value()
    rate = rounds * len(wanted) / (cpu_seconds() - started)
    del it, snapshot
    db.close()
    return rate


class StoreFloor:
    """The RocksDB calls a MultiGet makes per key (seek, key, value) for the keys of
    ``requests``, on the daemon's store at ``data_dir`` read as ``local://`` reads it (a
    secondary instance), at ``epoch``; each request's keys in the order the service seeks
    them (sorted), built before timing."""

    def __init__(self, data_dir: Path, job: str, epoch: int, requests: list[pb.MultiGetRequest]) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-floor-"))
        self._store = SecondaryStore(data_dir / "store", self._workdir)
        (store,) = self._store.stores(job)
        prefix, suffix = layout.data_prefix(store.store_id), layout.epoch_suffix(epoch)
        self._batches = [
            sorted(prefix + keycodec.encode_fields((row.fields[0].int,)) + suffix for row in request.keys)
            for request in requests
        ]
        self.keys_per_pass = sum(map(len, self._batches))
        self._view = self._store.view()
        self._it = self._view.iterator()

    def run(self, passes: int) -> int:
        """Seek every key of every request ``passes`` times; how many seeks that was."""
        it = self._it
        seek, key, value = it.seek, it.key, it.value
        for _ in range(passes):
            for batch in self._batches:
                for wanted in batch:
                    seek(wanted)
                    key()
                    value()
        return passes * self.keys_per_pass

    def close(self) -> None:
        del self._it, self._view
        self._store.close()
        shutil.rmtree(self._workdir, ignore_errors=True)


def paired_rates(
    multi_get: Callable[[], Any], keys_per_call: int, floor: StoreFloor, calls: int, rounds: int
) -> tuple[float, float]:
    """Keys per CPU-second of ``multi_get`` and of ``floor``, timed in alternating rounds
    (which goes first alternates too) so that a change of load meets both alike."""
    spent = {"multi": 0.0, "floor": 0.0}
    keys = {"multi": 0, "floor": 0}
    passes = max(1, calls * keys_per_call // floor.keys_per_pass)
    for turn in range(rounds):
        for which in ("multi", "floor") if turn % 2 == 0 else ("floor", "multi"):
            started = cpu_seconds()
            if which == "multi":
                for _ in range(calls):
                    multi_get()
                keys[which] += calls * keys_per_call
            else:
                keys[which] += floor.run(passes)
            spent[which] += cpu_seconds() - started
    return keys["multi"] / spent["multi"], keys["floor"] / spent["floor"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--changed", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-local-"))
    daemon = LocalDaemon(
        workdir / "daemon", {}, extra_args=["--retention-epochs", str(max(100, args.epochs))]
    )
    daemon.start()
    try:
        spark = local_session("bench-local-reads")
        print(f"building state: {args.keys} keys, {args.epochs} epochs ...", file=sys.stderr)
        checkpoint = build_state(spark, workdir, args.keys, args.epochs, args.changed)
        spark.stop()
        last = args.epochs - 1
        pinned = last - 5
        remote = EpochStateClient(daemon.unix_target, timeout=120)
        remote.follow("bench", str(checkpoint))
        remote.get("bench", [0], at_least=last)
        local = EpochStateClient(f"local://{daemon.data_dir}")

        rng = random.Random(1)
        users = [rng.randrange(args.keys) for _ in range(1000)]
        gets = [
            pb.GetRequest(
                store=pb.StoreRef(job="bench"),
                key=pb.Row(fields=[pb.Value(int=u)]),
                epoch=pb.EpochSelector(exact=pinned),
            )
            for u in users
        ]
        multis = {
            size: [
                pb.MultiGetRequest(
                    store=pb.StoreRef(job="bench"),
                    epoch=pb.EpochSelector(exact=pinned),
                    keys=[pb.Row(fields=[pb.Value(int=rng.randrange(args.keys))]) for _ in range(size)],
                )
                for _ in range(20)
            ]
            for size in (100, 1000)
        }
        for request in gets[:100]:
            assert local.stub.Get(request) == remote.stub.Get(request)
        for requests in multis.values():
            for multi in requests:
                assert local.stub.MultiGet(multi) == remote.stub.MultiGet(multi)

        rows: list[tuple[str, ...]] = []

        def add(
            name: str, samples: list[float], per_call: int = 1, cpu: float | None = None
        ) -> tuple[float, float]:
            p50, p99 = percentiles(samples)
            rate = per_call * len(samples) / sum(samples)
            unit = "keys/s" if per_call > 1 else "calls/s"
            cpu_text = "" if cpu is None else f"{cpu:.2f}"
            rows.append((name, f"{p50 * 1e6:,.1f}", f"{p99 * 1e6:,.1f}", f"{rate:,.0f} {unit}", cpu_text))
            return p50, rate

        timings = interleaved(
            {
                "(a) Get, pinned epoch, gRPC over the Unix socket": cycle_calls(remote.stub.Get, gets),
                "(b) Get, pinned epoch, local:// stub": cycle_calls(local.stub.Get, gets),
            },
            args.calls // 4,
        )
        for name, samples in timings.items():
            add(name, samples)
        keys = iter(users * (args.calls // len(users) + 2))
        started = cpu_seconds()
        samples = timed(lambda: local.get("bench", [next(keys)], epoch=pinned), args.calls, warmup=500)
        get_p50, _ = add("(c) client.get, pinned epoch, local:// (values decoded)", samples, cpu=None)
        stub_p50 = percentiles(timings["(b) Get, pinned epoch, local:// stub"])[0]
        best_rate = 0.0
        for size, requests in multis.items():
            calls = max(50, args.calls // size * 10)
            wall = time.perf_counter()
            started = cpu_seconds()
            samples = timed(cycle_calls(local.stub.MultiGet, requests), calls, warmup=20)
            cpu_share = (cpu_seconds() - started) / (time.perf_counter() - wall)
            rate = add(f"(d) MultiGet, {size} keys, local:// stub", samples, per_call=size, cpu=cpu_share)[1]
            # "On one core": the rate per second of CPU this process got (others share the cores).
            best_rate = max(best_rate, rate / max(cpu_share, 1e-9))
        floor = seek_floor(workdir / "floor", args.keys + (args.epochs - 1) * args.changed, users)
        rows.append(
            ("(f) floor: seek, key, value per key (rocksdict)", "", "", f"{floor:,.0f} keys/s", "1.00")
        )
        store_floor = StoreFloor(daemon.data_dir, "bench", pinned, multis[1000])
        try:
            paired, paired_floor = paired_rates(
                cycle_calls(local.stub.MultiGet, multis[1000]),
                1000,
                store_floor,
                max(40, args.calls // 100),
                6,
            )
        finally:
            store_floor.close()
        ratio = paired / paired_floor
        rows.append(
            (
                "(g) MultiGet, 1000 keys, local:// stub (rounds with g')",
                "",
                "",
                f"{paired:,.0f} keys/s",
                "1.00",
            )
        )
        rows.append(
            (
                "(g') floor: seek, key, value per key, same keys, same store",
                "",
                "",
                f"{paired_floor:,.0f} keys/s",
                "1.00",
            )
        )
        keys_list = [[u] for u in users[:1000]]
        samples = timed(lambda: local.multi_get("bench", keys_list, epoch=pinned), 50, warmup=5)
        add("(e) client.multi_get, 1000 keys, local:// (values decoded)", samples, per_call=1000)

        print()
        print(
            f"state: {args.keys:,} keys, {args.epochs} epochs, {args.changed:,} changed per epoch; "
            f"pinned epoch {pinned}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}; "
            "one calling thread"
        )
        print_table(("measurement", "p50 (µs)", "p99 (µs)", "throughput", "CPU (cores)"), rows)
        print()
        print("targets:")
        for what, p50 in (("stub", stub_p50), ("client.get", get_p50)):
            verdict = "met" if p50 <= 30e-6 else "NOT met"
            print(f"  Get p50 <= 30 µs, local:// {what}:  {p50 * 1e6:,.1f} µs  {verdict}")
        verdict = "met" if best_rate >= 500_000 else "NOT met"
        print(f"  MultiGet >= 500,000 keys/s on one core, local:// stub:  {best_rate:,.0f}  {verdict}")
        print("  (keys per CPU-second of this process: throughput / CPU (cores))")
        print(f"  (the floor, (f): {floor:,.0f} keys per CPU-second for the RocksDB calls alone)")
        verdict = "met" if ratio >= 0.5 else "NOT met"
        print(
            f"  MultiGet >= 0.5 x its floor (g / g'), local:// stub:  {paired:,.0f} / {paired_floor:,.0f}"
            f" = {ratio:.2f}  {verdict}"
        )
        local.close()
        remote.close()
    finally:
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
