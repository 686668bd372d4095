"""Stateful operators of a checkpoint and their stores.

Spark (4.0+) records them in ``state/<operatorId>/_metadata/metadata``: the line
``v1``, then a JSON object ``{"operatorInfo": {"operatorId", "operatorName"},
"stateStoreInfo": [{"storeName", "numColsPrefixKey", "numPartitions"}, ...]}``.
Checkpoints of Spark 3.5 lack the file; the layout of the state directory tells the rest.
transformWithState operators record themselves in ``_metadata/v2/<batch>`` instead
and serve one store per state variable (see :mod:`statevars`).
"""

from __future__ import annotations

from dataclasses import dataclass

from epochstate.core import jsontext
from epochstate.core.checkpoint.log import numeric_entries
from epochstate.core.sparktypes import StructType
from epochstate.core.storage.location import Location
from epochstate.daemon.sources.checkpoint.schemafile import ColumnFamilySchema
from epochstate.daemon.sources.errors import CorruptCheckpointFile, UnsupportedCheckpoint

DEFAULT_STORE = "default"
METADATA_DIR = "_metadata"
# The RocksDB provider's table files shared by a store's snapshots: beside them are
# the store's own files, so a partition folder holding it holds the default store.
SHARED_FILES_DIR = "SSTs"
# Files of the default store lying directly in a partition folder.
STORE_FILE_SUFFIXES = (".delta", ".snapshot", ".changelog", ".zip")


VALUE, LIST, MAP, TIMERS = "value", "list", "map", "timers"


@dataclass(frozen=True, slots=True)
class StateVariable:
    """A state variable of a transformWithState operator, served as a store of its own.

    ``kind`` is :data:`VALUE`, :data:`LIST`, :data:`MAP` or :data:`TIMERS`;
    ``family`` is the column family that holds it in the operator's one physical
    store (``physical_store``); ``key_schema`` and ``value_schema`` are what a lookup
    sees (see :mod:`statevars`).
    """

    kind: str
    family: ColumnFamilySchema
    physical_store: str
    key_schema: StructType
    value_schema: StructType
    ttl: bool = False


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """One named state store of an operator, split into ``num_partitions`` partitions.
    For a transformWithState operator, a store is one state variable (``variable``)."""

    name: str
    num_partitions: int
    num_cols_prefix_key: int = 0
    variable: StateVariable | None = None

    @property
    def kind(self) -> str:
        """The state variable's kind, ``""`` for a plain store."""
        return self.variable.kind if self.variable else ""


@dataclass(frozen=True, slots=True)
class OperatorInfo:
    """A stateful operator. ``name`` is Spark's (e.g. ``stateStoreSave``, ``dedupe``,
    ``symmetricHashJoin``), or ``None`` when the checkpoint does not record it."""

    operator_id: int
    name: str | None
    stores: tuple[StoreInfo, ...]


def parse_operator_metadata(operator_id: int, text: str, source: str = "<text>") -> OperatorInfo:
    """Parse the text of ``state/<operatorId>/_metadata/metadata``.

    Raises:
        UnsupportedCheckpoint: a format version other than ``v1``.
        CorruptCheckpointFile: a malformed file, or one naming another operator id.
    """
    version, _, body = text.partition("\n")
    if version != "v1":
        raise UnsupportedCheckpoint(f"{source}: operator metadata version {version!r}")
    try:
        obj = jsontext.loads(body)
        info = obj["operatorInfo"]
        recorded_id = int(info["operatorId"])
        stores = tuple(
            StoreInfo(
                name=str(s["storeName"]),
                num_partitions=int(s["numPartitions"]),
                num_cols_prefix_key=int(s.get("numColsPrefixKey", 0)),
            )
            for s in obj["stateStoreInfo"]
        )
        name = str(info["operatorName"])
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CorruptCheckpointFile(f"{source}: bad operator metadata: {err!r}") from err
    if recorded_id != operator_id:
        raise CorruptCheckpointFile(f"{source}: records operator {recorded_id}")
    return OperatorInfo(operator_id, name, stores)


def derive_operator(operator_id: int, operator_dir: Location) -> OperatorInfo:
    """Describe an operator from its directory layout: ``<partition>/`` holds the
    ``default`` store's files directly (with the RocksDB provider, its ``SSTs/`` too)
    and every other store in ``<partition>/<store>/``."""
    partitions = numeric_entries(operator_dir)
    stores: list[StoreInfo] = []
    if partitions:
        first = operator_dir / str(partitions[0])
        names: set[str] = set()
        for entry in first.iterdir():
            if entry.name.startswith("."):
                continue
            if entry.is_dir() and entry.name not in (METADATA_DIR, SHARED_FILES_DIR):
                names.add(entry.name)
            elif entry.name in (METADATA_DIR, SHARED_FILES_DIR) or entry.suffix in STORE_FILE_SUFFIXES:
                names.add(DEFAULT_STORE)
        stores = [StoreInfo(n, len(partitions)) for n in sorted(names)]
    return OperatorInfo(operator_id, None, tuple(stores))
