"""Write the fuzz seed corpus from the files real Spark queries write.

    python -m tests.fuzz.seeds            # rewrites tests/fuzz/corpus and tests/fuzz/schemas
    python -m tests.fuzz.seeds --keep var/seeds   # keeps (and reuses) the checkpoints

Runs small streaming queries in local mode, on the HDFS-backed provider (an
aggregation whose state holds every Spark type, a session window with a
prefix-scan key, a stream-stream join) and on RocksDB (changelog checkpointing on
and off, state checkpoint format 1 and 2, a transformWithState query with Avro
rows), then copies their small files into ``tests/fuzz/corpus/<target>/``, one
file per distinct content (named by its hash), and the schemas the row targets
decode with into ``tests/fuzz/schemas/``. The corpus is committed: the fuzz tests
need no Spark. Run it again when Spark's formats change.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import time
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from epochstate.devtools.python_workers import worker_python

# As the test session does: UTC, and Python workers on this interpreter.
os.environ["TZ"] = "UTC"
time.tzset()
os.environ["PYSPARK_PYTHON"] = worker_python()
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from epochstate.core.sparktypes import type_to_json  # noqa: E402
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint  # noqa: E402
from epochstate.daemon.sources.rocksdb.changelog import iter_changelog_ops  # noqa: E402
from epochstate.daemon.sources.rows.lz4stream import read_lz4_block_stream  # noqa: E402
from epochstate.daemon.sources.rows.statefile import iter_records  # noqa: E402
from tests.fixtures.spark import local_test_session  # noqa: E402
from tests.fuzz.targets import CORPUS, SCHEMAS  # noqa: E402

MAX_SEED_BYTES = 48 * 1024
MAX_SEEDS = 48  # per target
ROWS_PER_STORE = 6


def run_queries(spark: Any, base: Path) -> dict[str, Path]:
    """Run the seed queries; their checkpoints by name."""
    from tests.compat.workload.queries import SCHEMA as TWS_SCHEMA
    from tests.compat.workload.queries import transform_with_state as tagged
    from tests.e2e.test_operators_tws import tagged_rows
    from tests.fixtures.streams import FileStream
    from tests.fixtures.tws_oracle import run_batches, tws_session
    from tests.sources.conftest import (
        CHANGELOG_CONF,
        FORMAT_VERSION_CONF,
        ROCKSDB_PROVIDER,
        _input_stream,
        _run_to_end,
        _stateful_frames,
        _write_batch,
    )

    source = base / "in"
    source.mkdir()
    for batch in (1, 2, 3):  # batch 0 adds bulk rows: state files too big for seeds
        _write_batch(source, batch)
    runs: list[tuple[Path, Any, str]] = []
    paths: dict[str, Path] = {}
    hdfs = _stateful_frames(_input_stream(spark.newSession(), source))
    for name in ("plain", "session", "join"):
        paths[f"hdfs-{name}"] = base / f"hdfs-{name}"
        runs.append((paths[f"hdfs-{name}"], *hdfs[name]))
    for query, changelog, version in (("window", True, 1), ("window", True, 2), ("dedup", False, 1)):
        session = spark.newSession()
        session.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        session.conf.set(CHANGELOG_CONF, str(changelog).lower())
        session.conf.set(FORMAT_VERSION_CONF, str(version))
        name = f"rocksdb-{query}-{'changelog' if changelog else 'zip'}-v{version}"
        paths[name] = base / name
        runs.append((paths[name], *_stateful_frames(_input_stream(session, source))[query]))
    _run_to_end(runs)
    for encoding in ("avro", "unsaferow"):
        name = f"tws-{encoding}"
        paths[name] = base / name / "cp"
        stream = FileStream(
            tws_session(spark, True, encoding), base / name / "in", paths[name], tagged, TWS_SCHEMA, "update"
        )
        run_batches(stream, [tagged_rows(b) for b in range(4)])
        stream.stop()
    return paths


class Corpus:
    """Seeds by target, each content once."""

    def __init__(self) -> None:
        self.seeds: dict[str, dict[str, bytes]] = defaultdict(dict)

    def add(self, target: str, data: bytes) -> None:
        if 0 < len(data) <= MAX_SEED_BYTES and len(self.seeds[target]) < MAX_SEEDS:
            self.seeds[target].setdefault(hashlib.sha1(data).hexdigest()[:16], data)

    def write(self) -> None:
        for target, seeds in sorted(self.seeds.items()):
            directory = CORPUS / target
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            for name, data in seeds.items():
                (directory / name).write_bytes(data)
            print(f"{target}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes")


def _decompressed(path: Path) -> bytes | None:
    try:
        return read_lz4_block_stream(path.read_bytes(), str(path))
    except Exception:
        return None


def collect_files(corpus: Corpus, checkpoint: Path) -> None:
    """Every small file of ``checkpoint`` into the corpus of the target that parses it."""
    for path in sorted(p for p in checkpoint.rglob("*") if p.is_file() and not p.name.startswith(".")):
        relative = path.relative_to(checkpoint).parts
        if path.suffix in (".delta", ".snapshot", ".changelog"):
            corpus.add("lz4_block_stream", path.read_bytes())
            content = _decompressed(path)
            if content is not None:
                corpus.add("changelog" if path.suffix == ".changelog" else "state_records", content)
        elif path.suffix == ".zip":
            corpus.add("snapshot_zip", path.read_bytes())
            with zipfile.ZipFile(path) as archive:
                for name in archive.namelist():
                    if name.startswith("MANIFEST-"):
                        corpus.add("manifest", archive.read(name))
                    elif name == "metadata":
                        corpus.add("checkpoint_log", archive.read(name))
        elif path.suffix == ".sst":
            corpus.add("sst", path.read_bytes())
        elif "_stateSchema" in relative or relative[-2:] == ("_metadata", "schema"):
            corpus.add("schema_file", path.read_bytes())
            corpus.add("schema_codecs", path.read_bytes())
        elif relative[0] in ("offsets", "commits", "metadata") or "_metadata" in relative:
            corpus.add("checkpoint_log", path.read_bytes())


def collect_rows(corpus: Corpus, checkpoints: dict[str, Path]) -> list[dict[str, Any]]:
    """UnsafeRow seeds (selector, key, value) of every store of the HDFS and RocksDB
    (UnsafeRow, no column family) checkpoints; the schemas they index."""
    schemas: list[dict[str, Any]] = []
    for name, root in sorted(checkpoints.items()):
        if name.startswith("tws"):
            continue
        rocksdb = name.startswith("rocksdb")
        checkpoint = Checkpoint(root)
        for operator in checkpoint.operators():
            for store in operator.stores:
                key, value = checkpoint.store_schema(operator.operator_id, store.name)
                selector = 2 * len(schemas) + int(rocksdb)
                schemas.append(
                    {
                        "key": type_to_json(key),
                        "value": type_to_json(value),
                        "numColsPrefixKey": store.num_cols_prefix_key if rocksdb else 0,
                        "from": f"{name} operator {operator.operator_id} store {store.name}",
                    }
                )
                taken = 0
                directory = root / "state" / str(operator.operator_id) / "0"
                if store.name != "default":
                    directory = directory / store.name
                for path in sorted(directory.glob("*.changelog" if rocksdb else "*.delta")):
                    content = _decompressed(path)
                    if content is None:
                        continue
                    records = (
                        [(r.key, r.value) for r in iter_changelog_ops(content)[1]]
                        if rocksdb
                        else list(iter_records(content))
                    )
                    for raw_key, raw_value in records:
                        if raw_value is not None and taken < ROWS_PER_STORE:
                            corpus.add(
                                "unsafe_row",
                                bytes([selector % 256])
                                + struct.pack(">H", len(raw_key))
                                + raw_key
                                + raw_value,
                            )
                            taken += 1
    return schemas


def collect_avro(corpus: Corpus, checkpoint: Path) -> bytes:
    """Avro rows of the transformWithState checkpoint's column families; its v3 schema file."""
    from epochstate.daemon.sources.checkpoint.schemafile import parse_column_family_schemas

    schema_files = sorted((checkpoint / "state/0/_stateSchema/default").iterdir())
    schema = schema_files[-1].read_bytes()
    families = [f.name for f in parse_column_family_schemas(schema)]
    store = checkpoint / "state/0/0"
    ids: dict[int, str] = {}
    for path in store.glob("*.zip"):
        with zipfile.ZipFile(path) as archive:
            mapping = json.loads(archive.read("metadata").decode().partition("\n")[2])
        ids.update({int(v): k for k, v in mapping.get("columnFamilyMapping", {}).items()})
    for path in sorted(store.glob("*.changelog")):
        content = _decompressed(path)
        if content is None:
            continue
        for record in iter_changelog_ops(content)[1]:
            family = ids.get(int.from_bytes(record.key[:2], "little"))
            if family not in families:
                continue
            index = families.index(family)
            corpus.add("avro", bytes([2 * index]) + record.key[2:])
            if record.value is not None:
                corpus.add("avro", bytes([2 * index + 1]) + record.value)
    return schema


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--keep", type=Path, help="write the checkpoints here and keep them (reused when present)"
    )
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="epochstate-seeds-"))
    done = base / "checkpoints.json"
    spark = None
    try:
        if done.exists():
            checkpoints = {k: Path(v) for k, v in json.loads(done.read_text()).items()}
        else:
            base.mkdir(parents=True, exist_ok=True)
            spark = local_test_session("epochstate-fuzz-seeds")
            checkpoints = run_queries(spark, base)
            done.write_text(json.dumps({k: str(v) for k, v in checkpoints.items()}))
        corpus = Corpus()
        for checkpoint in checkpoints.values():
            collect_files(corpus, checkpoint)
        schemas = collect_rows(corpus, checkpoints)
        avro_schema = collect_avro(corpus, checkpoints["tws-avro"])
        corpus.write()
        SCHEMAS.mkdir(exist_ok=True)
        (SCHEMAS / "rows.json").write_text(json.dumps(schemas, indent=1) + "\n")
        (SCHEMAS / "tws_avro.schema").write_bytes(avro_schema)
        print(f"schemas: {len(schemas)} stores")
    finally:
        if spark is not None:
            spark.stop()
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
