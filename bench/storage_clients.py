"""S3 clients for the daemon's request pattern, on one S3-protocol server, in one run.

    python bench/storage_clients.py [--rounds 200] [--big-mb 2]

A moto server on loopback holds a commit log (``--entries`` small objects under one
prefix), a small log entry and a snapshot-sized object (``--big-mb``). Each client
makes, in interleaved rounds, the requests a followed checkpoint costs: a LIST of the
commit log, a GET of a small entry, a HEAD, a GET of the whole big object and a
ranged GET of its last 64 KiB. Clients:

* ``http.client``: unsigned requests on one kept-alive connection, the server's own
  cost per request (the floor every client stands on);
* ``s3fs``: fsspec's S3 implementation, through the daemon's :class:`RemoteStorage`
  (retries and request counting included), as the daemon uses it;
* ``obstore``: the Rust ``object_store`` crate's Python binding, called directly.

p50 and p99 of each request in ms, and the big GET's throughput.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from table import print_table

from epochstate.core.storage.location import StorageFactory
from epochstate.devtools.object_store import S3Server


def _http_client(server: S3Server, bucket: str) -> dict[str, Callable[[], object]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)

    def request(method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
        connection.request(method, f"/{bucket}/{path}", headers=headers or {})
        response = connection.getresponse()
        body = response.read()
        assert response.status < 300, (response.status, body[:200])
        return body

    def listing() -> object:
        connection.request("GET", f"/{bucket}?list-type=2&prefix=cp/commits/&delimiter=/")
        response = connection.getresponse()
        return response.read()

    return {
        "LIST commits/": listing,
        "GET small entry": lambda: request("GET", "cp/offsets/7"),
        "HEAD small entry": lambda: request("HEAD", "cp/offsets/7"),
        "GET big object, whole": lambda: request("GET", "cp/state/0/0/9.zip"),
        "GET big object, last 64 KiB": lambda: request(
            "GET", "cp/state/0/0/9.zip", {"Range": "bytes=-65536"}
        ),
    }


def _s3fs(bucket: str, size: int, cache: Path) -> dict[str, Callable[[], object]]:
    root = StorageFactory(cache_dir=cache).open(f"s3://{bucket}/cp")
    big = root / "state" / "0" / "0" / "9.zip"
    entry = root / "offsets" / "7"
    return {
        "LIST commits/": lambda: (root / "commits").names(),
        "GET small entry": entry.read_bytes,
        "HEAD small entry": entry.stat,
        "GET big object, whole": big.read_bytes,
        "GET big object, last 64 KiB": lambda: big.read_range(size - 65536, size),
    }


def _obstore(server: S3Server, bucket: str, size: int) -> dict[str, Callable[[], object]]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        bucket,
        endpoint=server.endpoint,
        region=server.env["AWS_DEFAULT_REGION"],
        access_key_id=server.env["AWS_ACCESS_KEY_ID"],
        secret_access_key=server.env["AWS_SECRET_ACCESS_KEY"],
        client_options={"allow_http": True},
    )
    return {
        "LIST commits/": lambda: obstore.list_with_delimiter(store, "cp/commits/"),
        "GET small entry": lambda: obstore.get(store, "cp/offsets/7").bytes(),
        "HEAD small entry": lambda: obstore.head(store, "cp/offsets/7"),
        "GET big object, whole": lambda: obstore.get(store, "cp/state/0/0/9.zip").bytes(),
        "GET big object, last 64 KiB": lambda: obstore.get_range(
            store, "cp/state/0/0/9.zip", start=size - 65536, end=size
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--big-mb", type=float, default=2.0)
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-clients-"))
    server = S3Server(workdir / "s3").start()
    os.environ.update(server.env)
    try:
        bucket = server.new_bucket()
        s3 = server.client()
        s3.put_bucket_acl(Bucket=bucket, ACL="public-read")  # the floor's requests are unsigned
        for n in range(args.entries):
            s3.put_object(
                Bucket=bucket,
                Key=f"cp/commits/{n}",
                Body=b'v1\n{"nextBatchWatermarkMs":0}',
                ACL="public-read",
            )
        s3.put_object(Bucket=bucket, Key="cp/offsets/7", Body=b"v1\n" + b"x" * 1500, ACL="public-read")
        size = int(args.big_mb * (1 << 20))
        s3.put_object(Bucket=bucket, Key="cp/state/0/0/9.zip", Body=os.urandom(size), ACL="public-read")
        clients = {
            "http.client (floor)": _http_client(server, bucket),
            "s3fs (RemoteStorage)": _s3fs(bucket, size, workdir / "cache"),
            "obstore": _obstore(server, bucket, size),
        }
        samples: dict[tuple[str, str], list[float]] = {}
        cpu: dict[str, float] = dict.fromkeys(clients, 0.0)
        for calls in clients.values():  # warm up: connections, credentials, the event loop
            for call in calls.values():
                call()
        for _ in range(args.rounds):
            for client, calls in clients.items():
                for op, call in calls.items():
                    started, started_cpu = time.perf_counter(), time.process_time()
                    call()
                    samples.setdefault((client, op), []).append(time.perf_counter() - started)
                    cpu[client] += time.process_time() - started_cpu
    finally:
        server.stop()

    rows: list[tuple[str, ...]] = []
    for (client, op), seconds in samples.items():
        ordered = sorted(seconds)
        p50 = statistics.median(ordered) * 1000
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        extra = f"{size / (1 << 20) / statistics.median(ordered):,.0f} MiB/s" if op.endswith("whole") else ""
        rows.append((op, client, f"{p50:.2f}", f"{p99:.2f}", extra))
    rows.sort(key=lambda r: (list(clients["obstore"]).index(r[0]), r[1]))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"moto server on loopback; {args.rounds} interleaved rounds; LIST of {args.entries} entries; "
        f"big object {args.big_mb:g} MiB; {os.cpu_count()} cores; load average {load}"
    )
    print_table(("request", "client", "p50 ms", "p99 ms", "throughput"), rows)
    print()
    print(
        "CPU seconds of this process per client, all rounds: "
        + ", ".join(f"{c} {s:.2f}" for c, s in cpu.items())
    )


if __name__ == "__main__":
    main()
