"""The state variables of a transformWithState operator, each served as a store.

Spark 4.0 records such an operator (``transformWithStateExec``,
``transformWithStateInPandasExec``) in ``state/<op>/_metadata/v2/<batch>``: the line
``v2``, then ``{"operatorInfo": {"operatorId", "operatorName"}, "stateStoreInfo":
[{"storeName", "numColsPrefixKey", "numPartitions", "stateSchemaFilePaths": [...]}],
"operatorPropertiesJson": "<JSON text>"}`` whose properties hold ``timeMode``,
``outputMode`` and ``stateVariables`` (``{"stateName", "stateVariableType":
"ValueState" | "ListState" | "MapState" | "TimerState", "ttlEnabled"}``). All
variables live in the one RocksDB store ``default``, one column family each, whose
schemas are in the newest file the metadata names (``_stateSchema/default/...``,
format v3, see :mod:`schemafile`).

Each variable is served as a store named like the variable, with the schemas of
Spark's own reader (``statestore`` with ``stateVarName``) where it has one:

=====  ===================================================  =======================================
kind   key                                                  value
=====  ===================================================  =======================================
value  the grouping key                                     the variable's value
list   the grouping key                                     ``struct<list_value: array<element>>``
map    ``struct<key: grouping key, user_map_key: map key>``  the map value for that key
=====  ===================================================  =======================================

The timers (``readRegisteredTimers`` in Spark's reader) are the store ``$timers``
(``$`` cannot start a variable's name, so it never clashes): key ``struct<key:
grouping key, expiration_timestamp_ms: bigint>``, value an empty struct; a timer
exists while its key does. A scan with a grouping-key prefix lists one key's map
entries or timers.

A variable with a TTL (``ttlEnabled``) stores every value as ``struct<value: the
value, ttlExpirationMs: bigint>`` (for a list, each element; for a map, each entry)
and its schema file entry says so, so it is served with that value schema, as
Spark's reader shows it. Spark removes expired entries at the end of the batch whose
(processing-time) timestamp reaches their expiry, so an epoch never holds an entry
expired before its batch started; entries are served as stored, never filtered by
time. The TTL's secondary indexes are column families of their own: ``$ttl_<name>``
(``struct<expirationMs, elementKey>`` -> nothing, range-scan ordered by expiry; the
element key is the grouping key, or ``struct<key, userKey>`` for a map), and for a
list ``$min_<name>`` (grouping key -> ``struct<expirationMs>``, the list's earliest
expiry) and ``$count_<name>`` (grouping key -> ``struct<count>``).

Spark's internal column families (the timers' second index, list row counters, the
TTL indexes, the Scala API's ``default``) are not served: Spark's reader refuses
them as ``stateVarName`` and the operator metadata does not list them, and every
fact they hold (an expiry, a list's length) is in the variable's own rows.
"""

from __future__ import annotations

from dataclasses import replace

from epochstate.core import jsontext
from epochstate.core.checkpoint.log import numeric_entries
from epochstate.core.sparktypes import ArrayType, StructField, StructType
from epochstate.core.storage.location import Location
from epochstate.daemon.sources.checkpoint.operators import (
    LIST,
    MAP,
    METADATA_DIR,
    TIMERS,
    VALUE,
    OperatorInfo,
    StateVariable,
    StoreInfo,
)
from epochstate.daemon.sources.checkpoint.schemafile import ColumnFamilySchema, parse_column_family_schemas
from epochstate.daemon.sources.errors import (
    CorruptCheckpointFile,
    MissingCheckpointFile,
    UnsupportedCheckpoint,
)

TIMERS_STORE = "$timers"
SCHEMA_DIR = "_stateSchema"
_KINDS = {"ValueState": VALUE, "ListState": LIST, "MapState": MAP}
_TIMER_FAMILIES = {"EventTime": "$eventTimers_keyToTimestamp", "ProcessingTime": "$procTimers_keyToTimestamp"}


def has_v2_metadata(operator_dir: Location) -> bool:
    """Whether the operator records itself in ``_metadata/v2/``."""
    return bool(numeric_entries(operator_dir / METADATA_DIR / "v2"))


def run_of(batches: list[int], epoch: int) -> int:
    """Of an operator's ``_metadata/v2`` entries (ascending, not empty), the one of the
    run that planned ``epoch``: the newest at or before it."""
    return max((b for b in batches if b <= epoch), default=batches[0])


def read_v2_operator(operator_id: int, operator_dir: Location, epoch: int | None = None) -> OperatorInfo:
    """The operator as the run that planned ``epoch`` describes it (``None``: the newest
    run), with one store per state variable when it has any. Each run writes its own
    ``_metadata/v2/<its first batch>``: the newest at or before ``epoch`` holds.

    Raises:
        MissingCheckpointFile: no v2 metadata, or the schema file it names is gone.
        CorruptCheckpointFile, UnsupportedCheckpoint: a malformed metadata or schema file.
    """
    batches = numeric_entries(operator_dir / METADATA_DIR / "v2")
    if not batches:
        raise MissingCheckpointFile(f"{operator_dir / METADATA_DIR}/v2: no operator metadata")
    chosen = batches[-1] if epoch is None else run_of(batches, epoch)
    path = operator_dir / METADATA_DIR / "v2" / str(chosen)
    source = str(path)
    version, _, body = _read(path).partition("\n")
    if version != "v2":
        raise UnsupportedCheckpoint(f"{source}: operator metadata version {version[:20]!r}")
    try:
        obj = jsontext.loads(body)
        info = obj["operatorInfo"]
        recorded_id, name = int(info["operatorId"]), str(info["operatorName"])
        stores = [
            (
                str(s["storeName"]),
                int(s["numPartitions"]),
                int(s.get("numColsPrefixKey", 0)),
                [str(p) for p in s.get("stateSchemaFilePaths") or ()],
            )
            for s in obj["stateStoreInfo"]
        ]
        properties = jsontext.loads(obj.get("operatorPropertiesJson") or "{}")
        variables = [
            (str(v["stateName"]), str(v["stateVariableType"]), bool(v.get("ttlEnabled", False)))
            for v in properties.get("stateVariables", ())
        ]
        time_mode = str(properties.get("timeMode", "None"))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CorruptCheckpointFile(f"{source}: bad operator metadata: {err!r}") from err
    if recorded_id != operator_id:
        raise CorruptCheckpointFile(f"{source}: records operator {recorded_id}")
    if not variables:
        return OperatorInfo(operator_id, name, tuple(StoreInfo(s, n, k) for s, n, k, _ in stores))
    if len(stores) != 1 or not stores[0][3]:
        raise UnsupportedCheckpoint(f"{source}: state variables over {len(stores)} stores")
    store, partitions, _, schema_paths = stores[0]
    # The metadata names the schema file by its absolute URI; the checkpoint may have moved.
    schema_path = operator_dir / SCHEMA_DIR / store / schema_paths[-1].rsplit("/", 1)[-1]
    try:
        data = schema_path.read_bytes()
    except FileNotFoundError:
        raise MissingCheckpointFile(f"{schema_path}: named by {path}, does not exist") from None
    history = _schema_history(operator_dir / SCHEMA_DIR / store)
    families = {
        f.name: _with_history(f, history) for f in parse_column_family_schemas(data, str(schema_path))
    }
    result = []
    for var_name, var_type, ttl in variables:
        variable = _variable(var_name, var_type, ttl, time_mode, families, store, source)
        if variable is not None:
            store_name = TIMERS_STORE if variable.kind == TIMERS else var_name
            result.append(StoreInfo(store_name, partitions, variable.family.num_cols_prefix_key, variable))
    return OperatorInfo(operator_id, name, tuple(result))


_History = dict[str, tuple[dict[int, StructType], dict[int, StructType]]]


def _schema_history(directory: Location) -> _History:
    """Per column family, the key and value schema of each schema id any run's schema
    file names: rows written by an older run keep the id they were written with."""
    history: _History = {}
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or ".tmp" in entry.name:
            continue
        try:
            data = entry.read_bytes()
        except FileNotFoundError:
            continue
        for family in parse_column_family_schemas(data, str(entry)):
            keys, values = history.setdefault(family.name, ({}, {}))
            keys.setdefault(family.key_schema_id, family.key_schema)
            values.setdefault(family.value_schema_id, family.value_schema)
    return history


def _with_history(family: ColumnFamilySchema, history: _History) -> ColumnFamilySchema:
    keys, values = history.get(family.name, ({}, {}))
    return replace(
        family,
        written_keys=tuple(sorted((i, k) for i, k in keys.items() if i != family.key_schema_id)),
        written_values=tuple(sorted((i, v) for i, v in values.items() if i != family.value_schema_id)),
    )


def _read(path: Location) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingCheckpointFile(f"{path}: does not exist") from None
    except UnicodeDecodeError as err:
        raise CorruptCheckpointFile(f"{path}: not UTF-8: {err}") from err


def _variable(
    name: str,
    var_type: str,
    ttl: bool,
    time_mode: str,
    families: dict[str, ColumnFamilySchema],
    store: str,
    source: str,
) -> StateVariable | None:
    if var_type == "TimerState":
        family_name = _TIMER_FAMILIES.get(time_mode, name)
        kind = TIMERS
    elif var_type in _KINDS:
        family_name, kind = name, _KINDS[var_type]
    else:
        raise UnsupportedCheckpoint(f"{source}: state variable {name!r} of type {var_type!r}")
    family = families.get(family_name)
    if family is None:
        return None  # declared but never written (e.g. deleted since)
    key, value = family.key_schema, family.value_schema
    if kind in (MAP, TIMERS):
        if len(key.fields) != 2 or family.num_cols_prefix_key != 1:
            raise UnsupportedCheckpoint(f"{source}: {kind} state {name!r} with key {key}")
        second = "user_map_key" if kind == MAP else "expiration_timestamp_ms"
        key = StructType((_renamed(key.fields[0], "key"), _renamed(key.fields[1], second)))
    if kind == LIST:
        value = StructType((StructField("list_value", ArrayType(value, contains_null=False)),))
    elif kind == TIMERS:
        value = StructType(())
    return StateVariable(kind, family, store, key, value, ttl)


def _renamed(field: StructField, name: str) -> StructField:
    return StructField(name, field.type, field.nullable)
