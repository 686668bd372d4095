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
  (retries and request counting included), as the daemon used it before obstore;
* ``obstore (ObjectStoreStorage)``: obstore through the daemon's storage layer, as
  the daemon uses it now;
* ``obstore``: the Rust ``object_store`` crate's Python binding, called directly.

p50 and p99 of each request in ms, and the big GET's throughput. Then, with
obstore, what reading a snapshot zip as Spark writes it (about 4 KiB: MANIFEST,
CURRENT, an empty WAL, OPTIONS, metadata) costs whole against ranged: the end of
the zip for its central directory, then only the entries the diff needs
(MANIFEST, CURRENT, metadata), one range each or all in one ``get_ranges`` call.
"""

from __future__ import annotations

import argparse
import http.client
import io
import os
import statistics
import struct
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.table import print_table
from epochstate.core.storage.location import Location, StorageFactory
from epochstate.core.storage.remote import RemoteStorage
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


def _through_storage(root: Location, size: int) -> dict[str, Callable[[], object]]:
    big = root / "state" / "0" / "0" / "9.zip"
    entry = root / "offsets" / "7"
    return {
        "LIST commits/": lambda: (root / "commits").names(),
        "GET small entry": entry.read_bytes,
        "HEAD small entry": entry.stat,
        "GET big object, whole": big.read_bytes,
        "GET big object, last 64 KiB": lambda: big.read_range(size - 65536, size),
    }


def _s3fs(bucket: str, size: int) -> dict[str, Callable[[], object]]:
    """s3fs as the daemon used it before obstore: our retries, its own off."""
    import fsspec

    fs = fsspec.filesystem(
        "s3",
        skip_instance_cache=True,
        use_listings_cache=False,
        config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": 5, "read_timeout": 30},
    )
    return _through_storage(Location(RemoteStorage(fs, "s3"), f"{bucket}/cp"), size)


def _obstore_storage(bucket: str, size: int, cache: Path) -> dict[str, Callable[[], object]]:
    return _through_storage(StorageFactory(cache_dir=cache).open(f"s3://{bucket}/cp"), size)


def _obstore_store(server: S3Server, bucket: str) -> object:
    from obstore.store import S3Store

    return S3Store(
        bucket,
        endpoint=server.endpoint,
        region=server.env["AWS_DEFAULT_REGION"],
        access_key_id=server.env["AWS_ACCESS_KEY_ID"],
        secret_access_key=server.env["AWS_SECRET_ACCESS_KEY"],
        client_options={"allow_http": True},
    )


def _read_whole_zip(store: object) -> object:
    import obstore

    data = bytes(obstore.get(store, "cp/state/0/0/8.zip").bytes())  # type: ignore[arg-type]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [archive.read(n) for n in ("CURRENT", "metadata", "MANIFEST-000005")]


def _obstore(server: S3Server, bucket: str, size: int) -> dict[str, Callable[[], object]]:
    import obstore

    store: Any = _obstore_store(server, bucket)
    return {
        "LIST commits/": lambda: obstore.list_with_delimiter(store, "cp/commits/"),
        "GET small entry": lambda: obstore.get(store, "cp/offsets/7").bytes(),
        "HEAD small entry": lambda: obstore.head(store, "cp/offsets/7"),
        "GET big object, whole": lambda: obstore.get(store, "cp/state/0/0/9.zip").bytes(),
        "GET big object, last 64 KiB": lambda: obstore.get_range(
            store, "cp/state/0/0/9.zip", start=size - 65536, end=size
        ),
    }


def _spark_like_zip() -> bytes:
    """A zip laid out as Spark's snapshot zips are, with entries of their sizes."""
    buffer = io.BytesIO()
    rng = os.urandom
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("MANIFEST-000005", rng(600) * 6 + bytes(227))
        archive.writestr("CURRENT", b"MANIFEST-000005\n")
        archive.writestr("000004.log", b"")
        archive.writestr("OPTIONS-000007", (b"  option_name=value\n" * 380)[:7597])
        archive.writestr("metadata", b'v1\n{"sstFiles":[' + rng(120).hex().encode() + b"]}")
    return buffer.getvalue()


def _zip_entries_ranged(store: object, key: str, size: int, together: bool) -> int:
    """The zip's MANIFEST, CURRENT and metadata by ranges; returns the requests made."""
    import obstore

    tail = bytes(obstore.get_range(store, key, start=max(0, size - 1024), end=size))  # type: ignore[arg-type]
    eocd = tail.rfind(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack_from("<II", tail, eocd + 12)
    directory = tail[len(tail) - (size - cd_offset) : len(tail) - (size - cd_offset) + cd_size]
    wanted: list[tuple[int, int]] = []
    pos = 0
    while pos < len(directory):
        compressed, _, name_len, extra_len, comment_len = struct.unpack_from("<IIHHH", directory, pos + 20)
        offset = struct.unpack_from("<I", directory, pos + 42)[0]
        name = directory[pos + 46 : pos + 46 + name_len].decode()
        if name in ("CURRENT", "metadata") or name.startswith("MANIFEST-"):
            wanted.append((offset, offset + 30 + name_len + 64 + compressed))
        pos += 46 + name_len + extra_len + comment_len
    if together:
        obstore.get_ranges(store, key, starts=[a for a, _ in wanted], ends=[min(b, size) for _, b in wanted])  # type: ignore[arg-type]
        return 2
    for start, end in wanted:
        obstore.get_range(store, key, start=start, end=min(end, size))  # type: ignore[arg-type]
    return 1 + len(wanted)


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
        snapshot_zip = _spark_like_zip()
        s3.put_object(Bucket=bucket, Key="cp/state/0/0/8.zip", Body=snapshot_zip)
        clients = {
            "http.client (floor)": _http_client(server, bucket),
            "s3fs (RemoteStorage)": _s3fs(bucket, size),
            "obstore (ObjectStoreStorage)": _obstore_storage(bucket, size, workdir / "cache"),
            "obstore": _obstore(server, bucket, size),
        }
        store = _obstore_store(server, bucket)
        zip_size = len(snapshot_zip)
        zip_reads: dict[str, Callable[[], object]] = {
            "whole (1 request)": lambda: _read_whole_zip(store),
            "ranged, one request per entry (4 requests)": lambda: _zip_entries_ranged(
                store, "cp/state/0/0/8.zip", zip_size, together=False
            ),
            "ranged, entries in one get_ranges (2 calls)": lambda: _zip_entries_ranged(
                store, "cp/state/0/0/8.zip", zip_size, together=True
            ),
        }
        clients["snapshot zip"] = zip_reads
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

    order = [*clients["obstore"], *clients["snapshot zip"]]
    keyed: list[tuple[tuple[int, str], tuple[str, ...]]] = []
    for (client, op), seconds in samples.items():
        ordered = sorted(seconds)
        p50 = statistics.median(ordered) * 1000
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        extra = f"{size / (1 << 20) / statistics.median(ordered):,.0f} MiB/s" if op.endswith("whole") else ""
        shown = (f"snapshot zip ({zip_size:,} B)", op) if client == "snapshot zip" else (op, client)
        keyed.append(((order.index(op), client), (*shown, f"{p50:.2f}", f"{p99:.2f}", extra)))
    rows = [row for _, row in sorted(keyed)]
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
